"""BLEU both ways against a from-scratch BLEU (Papineni et al. 2002) on small fixed examples, and
chrF against sacreBLEU's own corpus_chrf."""

import collections
import math
import re

import pytest

from keras_transformer import evaluation
from keras_transformer.evaluation import chrf_score, paper_tokenize, sacrebleu_score, tokenized_bleu


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
    assert "tokenized" in str(result) and "tok:moses-de+compound-split" in result.signature


def test_sacrebleu_equals_reference_formula_on_13a_tokens():
    # these sentences are already 13a-tokenized (spaces around the final period), and share every
    # n-gram order, so smoothing does not apply and the from-scratch BLEU must agree exactly
    result = sacrebleu_score(HYPOTHESES, REFERENCES)
    assert result.score == pytest.approx(reference_bleu(HYPOTHESES, REFERENCES), abs=1e-6)
    assert result.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert str(result).startswith("sacreBLEU = ")


def test_chinese_references_get_sacrebleus_chinese_tokenizer_without_being_told():
    """Own files have no language: Chinese, written without spaces, is recognised by its script.
    Under 13a each sentence would be one word; under sacreBLEU's zh tokenizer every character is
    one, so BLEU is the from-scratch BLEU over characters."""
    references = ["今天天气很好。", "我们明天去北京看朋友。"]
    hypotheses = ["今天天气很好。", "我们明天去上海看朋友。"]  # every n-gram order shared
    result = sacrebleu_score(hypotheses, references)
    assert result.score == pytest.approx(reference_bleu([" ".join(h) for h in hypotheses],
                                                        [" ".join(r) for r in references]), abs=1e-6)
    assert "|tok:zh|" in result.signature
    as_words = sacrebleu_score(hypotheses, references, lang="de")
    assert "|tok:13a|" in as_words.signature and as_words.score < result.score - 10
    assert evaluation.evaluate_translations(hypotheses, references).sacrebleu == result


@pytest.mark.parametrize("texts,language", [
    (["今天天气很好。", "我们去北京。"], "zh"),
    (["私は学生です。", "今日は天気がいいです。"], "ja"),  # kana among the characters
    (["東京大学"], "zh"),  # no kana: Chinese characters alone cannot tell
    (["안녕하세요 여러분"], None),  # Korean has spaces between its words
    (["Das Büro in 北京 ist klein."], None),  # a few characters in Latin text
    (["", "123 !"], None),
])
def test_written_language_by_script(texts, language):
    assert evaluation.written_language(texts) == language


def test_a_tokenizer_that_cannot_run_is_one_line_naming_the_package(monkeypatch):
    import sacrebleu

    def missing(**kwargs):
        raise RuntimeError("\nJapanese tokenization requires extra dependencies\n")

    monkeypatch.setattr(sacrebleu, "BLEU", missing)
    with pytest.raises(ValueError, match=re.escape("target language 'ja' needs packages that are "
                                                   "not installed: pip install 'sacrebleu[ja]'")):
        sacrebleu_score(["今日は"], ["今日は"])


CHRF_SIGNATURE = re.compile(r"nrefs:1\|case:mixed\|eff:yes\|nc:6\|nw:0\|space:no\|version:[\d.]+")


def test_chrf_is_sacrebleus_corpus_chrf_with_its_signature():
    import sacrebleu

    expected = sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES])
    result = chrf_score(HYPOTHESES, REFERENCES)
    assert result.score == pytest.approx(expected.score, abs=1e-9)
    assert 0 < result.score < 100
    # a different number from BLEU on the same text: one cannot stand in for the other
    assert result.score != pytest.approx(sacrebleu_score(HYPOTHESES, REFERENCES).score, abs=1)
    assert CHRF_SIGNATURE.fullmatch(result.signature), result.signature
    assert result.signature.endswith(f"version:{sacrebleu.__version__}")
    # labelled as sacreBLEU labels it ("chrF2 = 65.94"), then the signature
    assert str(result) == f"{expected} ({result.signature})"
    assert str(result).startswith("chrF2 = ")


def test_an_evaluation_carries_chrf_beside_both_bleus():
    import sacrebleu

    result = evaluation.evaluate_translations(HYPOTHESES, REFERENCES)
    assert result.chrf.score == pytest.approx(
        sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score, abs=1e-9)
    assert [line.split(" = ")[0] for line in result.lines()] == [
        "sacreBLEU", "tokenized BLEU (Moses + compound split, the paper's)", "chrF2"]
    assert result.lines()[2] == f"chrF2 = {result.chrf.score:.2f} ({result.chrf.signature})"


def test_identity_is_100_and_mismatch_is_an_error():
    assert sacrebleu_score(REFERENCES, REFERENCES).score == pytest.approx(100)
    assert tokenized_bleu(REFERENCES, REFERENCES).score == pytest.approx(100)
    assert chrf_score(REFERENCES, REFERENCES).score == pytest.approx(100)
    with pytest.raises(ValueError, match="got 1 hypotheses and 2 references"):
        sacrebleu_score(HYPOTHESES[:1], REFERENCES)
    with pytest.raises(ValueError, match="got 1 hypotheses and 2 references"):
        chrf_score(HYPOTHESES[:1], REFERENCES)


# --- floors --------------------------------------------------------------------------------------

TRAIN = [
    ("Select a cell.", "Wählen Sie eine Zelle."),
    ("Choose Format - Cells.", "Wählen Sie Format - Zellen."),
    ("Click the OK button.", "Klicken Sie auf die Schaltfläche OK."),
    ("Select a range of cells.", "Wählen Sie einen Zellbereich."),
    ("Open the Styles deck.", "Öffnen Sie das Formatvorlagen-Deck."),
    ("Click Cancel to close the dialog.", "Klicken Sie auf Abbrechen, um den Dialog zu schließen."),
    ("Select a cell.", "Markieren Sie eine Zelle."),  # the same English again: ties go first
]


def test_copy_of_identical_sides_scores_100_and_matches_sacrebleu():
    import sacrebleu

    same = ["Calc", "Writer opens the Styles deck.", "Press F1 for help now."]
    assert evaluation.floors(same, same, TRAIN).copy.sacrebleu.score == pytest.approx(100.0)
    sources = ["Select the cell A1.", "Click the OK button twice."]
    references = ["Wählen Sie die Zelle A1.", "Klicken Sie zweimal auf OK."]
    copy = evaluation.floors(sources, references, TRAIN).copy
    assert copy.sacrebleu.score == pytest.approx(
        sacrebleu.corpus_bleu(sources, [references]).score)
    assert copy.chrf.score == pytest.approx(sacrebleu.corpus_chrf(sources, [references]).score)
    assert CHRF_SIGNATURE.fullmatch(copy.chrf.signature)


def brute_force_nearest(sources):
    """Cosine of TF-IDF vectors written out by hand (scikit-learn's smooth idf: ln((1+n)/(1+df))+1;
    word unigrams and bigrams, case kept), the earliest pair on ties."""
    import math
    import re
    from collections import Counter

    def terms(text):
        words = re.findall(r"\b\w+\b", text)
        return Counter(words + [" ".join(pair) for pair in zip(words, words[1:])])

    documents = [terms(source) for source, _ in TRAIN]
    n = len(documents)
    df = Counter(term for document in documents for term in document)
    idf = {term: math.log((1 + n) / (1 + count)) + 1 for term, count in df.items()}

    def vector(counts):
        v = {t: c * idf[t] for t, c in counts.items() if t in idf}
        norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
        return {t: x / norm for t, x in v.items()}

    train_vectors = [vector(d) for d in documents]
    result = []
    for source in sources:
        q = vector(terms(source))
        scores = [sum(q.get(t, 0.0) * x for t, x in v.items()) for v in train_vectors]
        best = max(range(n), key=lambda i: (scores[i], -i))
        result.append((best, scores[best]))
    return result


@pytest.mark.parametrize("exact_pairs,scores_per_batch", [
    (10 ** 6, 10 ** 6),  # every n-gram kept, all sources at once
    (0, 10 ** 6),        # hashed n-grams, as for a corpus above EXACT_PAIRS
    (10 ** 6, len(TRAIN)),  # a source at a time in each thread, as for a large corpus
])
def test_translation_memory_finds_exact_matches_and_the_nearest_pair(monkeypatch, exact_pairs,
                                                                     scores_per_batch):
    monkeypatch.setattr(evaluation, "EXACT_PAIRS", exact_pairs)
    monkeypatch.setattr(evaluation, "SCORES_AT_ONCE", scores_per_batch)
    memory = evaluation.TranslationMemory(TRAIN)
    sources = ["Select a cell.", "Click the OK button.", "Select a range of cells in Calc.",
               "Click Cancel.", "Open the deck.", "Zebra xylophone."]
    indices, similarities = memory.nearest(sources)
    expected = brute_force_nearest(sources)
    assert indices == [i for i, _ in expected]
    assert similarities == pytest.approx([s for _, s in expected])
    lookup = memory.lookup(sources)
    # exact matches: the German of that very sentence (the first of two on a tie)
    assert lookup[:2] == ["Wählen Sie eine Zelle.", "Klicken Sie auf die Schaltfläche OK."]
    assert similarities[0] == pytest.approx(1.0) and similarities[-1] == 0.0


def test_a_memory_of_chinese_sources_matches_their_characters():
    """Chinese sources have no spaces: as words each would be one, and only an identical sentence
    would match (every other source at cosine 0, pair 0)."""
    train = [("我们明天去北京。", "We go to Beijing tomorrow."),
             ("今天天气很好。", "The weather is fine today."),
             ("这本书很好看。", "This book is good.")]
    memory = evaluation.TranslationMemory(train)
    indices, similarities = memory.nearest(["今天天气不好。", "那本书很好看吗"])
    assert indices == [1, 2] and all(0 < s < 1 for s in similarities)


def test_the_memorys_chrf_is_that_of_the_retrieved_translations():
    import sacrebleu

    sources = ["Select a range of cells in Calc.", "Click Cancel.", "Open the deck."]
    references = ["Wählen Sie einen Zellbereich in Calc.", "Klicken Sie auf Abbrechen.",
                  "Öffnen Sie das Deck."]
    retrieved = [TRAIN[i][1] for i, _ in brute_force_nearest(sources)]
    floors = evaluation.floors(sources, references, TRAIN)
    expected = sacrebleu.corpus_chrf(retrieved, [references]).score
    assert 0 < expected < 100
    assert floors.translation_memory.chrf.score == pytest.approx(expected)
    assert floors.to_dict()["translation_memory"]["chrf"] == pytest.approx(expected)
    assert floors.to_dict()["copy"]["chrf"] == pytest.approx(
        sacrebleu.corpus_chrf(sources, [references]).score)


def test_verdict_says_whether_the_model_beat_the_memory():
    references = ["Wählen Sie eine Zelle.", "Klicken Sie auf die Schaltfläche OK."]
    sources = ["Select a cell.", "Click the OK button."]
    floors = evaluation.floors(sources, references, TRAIN)
    assert floors.translation_memory.sacrebleu.score == pytest.approx(100.0)
    weak = evaluation.evaluate_translations(["Zelle.", "OK."], references)
    line = evaluation.verdict(weak, floors)
    score = weak.sacrebleu.score
    assert line.startswith(f"verdict: {score:.2f} sacreBLEU, {100 - score:.2f} below the translation "
                           "memory (100.00)")  # the model's score, the gap, the memory's score
    assert "not learned to translate" in line
    assert "\n" not in line
    perfect_floors = evaluation.floors(sources, references, TRAIN[2:3])
    strong = evaluation.evaluate_translations(references, references)
    assert "above the translation memory" in evaluation.verdict(strong, perfect_floors)
    lines = evaluation.floor_lines(weak, floors)
    assert [line.split()[0] for line in lines] == ["model", "translation", "copy"]
    assert f"{weak.sacrebleu.score:6.2f}" in lines[0]
    for line, scored in zip(lines, (weak, floors.translation_memory, floors.copy)):
        assert line.endswith(f"chrF2 {scored.chrf.score:6.2f}"), line


def test_the_verdict_counts_the_test_sources_that_are_training_sources_too():
    """Exactly equal sources only (a memory and a model may have seen their translations): a
    source twice in the test counts twice, one twice in training once, a near one not."""
    sources = ["Select a cell.", "Select a cell.", "Click the OK button", "Open the deck."]
    references = ["Wählen Sie eine Zelle."] * 2 + ["Klicken Sie auf OK.", "Öffnen Sie das Deck."]
    floors = evaluation.floors(sources, references, TRAIN)
    assert floors.sources_in_training == 2
    model = evaluation.evaluate_translations(references, references)
    assert evaluation.verdict(model, floors).endswith(
        " 2 of the 4 test sources (50.0%) are training sources too.")
    unseen = evaluation.floors(sources[2:], references[2:], TRAIN)
    assert unseen.sources_in_training == 0
    assert evaluation.verdict(evaluation.evaluate_translations(references[2:], references[2:]),
                              unseen).endswith(" No test source is a training source.")
