"""BLEU both ways against a from-scratch BLEU (Papineni et al. 2002) on small fixed examples."""

import collections
import math

import pytest

from keras_transformer.evaluation import paper_tokenize, sacrebleu_score, tokenized_bleu


def reference_bleu(hypotheses, references):
    """Corpus BLEU-4 over whitespace tokens, one reference, no smoothing (multi-bleu.perl)."""
    matches, totals = [0] * 4, [0] * 4
    hyp_length = ref_length = 0
    for hyp, ref in zip(hypotheses, references):
        h, r = hyp.split(), ref.split()
        hyp_length, ref_length = hyp_length + len(h), ref_length + len(r)
        for n in range(1, 5):
            h_grams = collections.Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            r_grams = collections.Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            matches[n - 1] += sum(min(c, r_grams[g]) for g, c in h_grams.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    if min(matches) == 0:
        return 0.0
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / 4
    brevity = min(0.0, 1 - ref_length / hyp_length)
    return 100 * math.exp(log_precision + brevity)


HYPOTHESES = ["Die Katze sitzt auf der Matte .", "Er kauft einen Welt-Meister-Titel ."]
REFERENCES = ["Die Katze saß auf der Matte .", "Er kauft sich einen Welt-Meister-Titel ."]


def test_compound_split_matches_the_perl_one_liner():
    assert paper_tokenize("Er ist Welt-Meister.") == "Er ist Welt ##AT##-##AT## Meister ."
    # perl's /g does not overlap matches: the second hyphen of x-y-z stays (checked with perl)
    assert paper_tokenize("Welt-Meister-Titel x-y-z") == (
        "Welt ##AT##-##AT## Meister ##AT##-##AT## Titel x ##AT##-##AT## y-z")
    assert paper_tokenize("Preis: 5 - 6 Euro") == "Preis : 5 - 6 Euro"


def test_tokenized_bleu_equals_reference_formula_on_tokenized_text():
    tokenized_h = [paper_tokenize(h) for h in HYPOTHESES]
    tokenized_r = [paper_tokenize(r) for r in REFERENCES]
    expected = reference_bleu(tokenized_h, tokenized_r)
    result = tokenized_bleu(HYPOTHESES, REFERENCES)
    assert result.score == pytest.approx(expected, abs=1e-6)
    assert 0 < expected < 100
    # the split changes the number: compounds become three tokens
    assert result.score != pytest.approx(reference_bleu(HYPOTHESES, REFERENCES), abs=1e-3)
    assert "tokenized" in str(result) and "tok:none" in result.signature


def test_sacrebleu_equals_reference_formula_on_13a_tokens():
    # these sentences are already 13a-tokenized (spaces around the final period), and share every
    # n-gram order, so smoothing does not apply and the from-scratch BLEU must agree exactly
    result = sacrebleu_score(HYPOTHESES, REFERENCES)
    assert result.score == pytest.approx(reference_bleu(HYPOTHESES, REFERENCES), abs=1e-6)
    assert result.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert str(result).startswith("sacreBLEU = ")


def test_identity_is_100_and_mismatch_is_an_error():
    assert sacrebleu_score(REFERENCES, REFERENCES).score == pytest.approx(100)
    assert tokenized_bleu(REFERENCES, REFERENCES).score == pytest.approx(100)
    with pytest.raises(ValueError, match="got 1 hypotheses and 2 references"):
        sacrebleu_score(HYPOTHESES[:1], REFERENCES)
