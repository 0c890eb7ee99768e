"""BLEU, measured two ways and always labelled.

- ``sacrebleu_score``: sacreBLEU on detokenized text (its signature travels with the number). This is
  the comparable figure.
- ``tokenized_bleu``: how the paper's 27.3 / 28.4 (Table 2) were computed: Moses-tokenized hypothesis and
  reference, hyphenated compounds split into ``Welt ##AT##-##AT## Meister`` (tensor2tensor's
  ``get_ende_bleu.sh``), then multi-bleu.perl's BLEU (no smoothing). It is usually higher than sacreBLEU for
  the same output (fairseq reports 29.3 tokenized vs 28.6 sacreBLEU for one model), so it is never printed
  without its label.
"""

import dataclasses
import re
from typing import Sequence

import sacrebleu
from sacremoses import MosesTokenizer

SACREBLEU = "sacreBLEU"
TOKENIZED = "tokenized BLEU (Moses + compound split, the paper's)"

_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)")


@dataclasses.dataclass(frozen=True)
class BleuResult:
    label: str
    score: float
    signature: str
    precisions: tuple
    brevity_penalty: float

    def __str__(self):
        return f"{self.label} = {self.score:.2f} ({self.signature})"


def _check(hypotheses, references):
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"BLEU needs one hypothesis per reference: got {len(hypotheses)} hypotheses "
                         f"and {len(references)} references.")
    if not references:
        raise ValueError("BLEU of an empty test set is undefined: no references given.")
    return hypotheses, references


def _result(label, metric, bleu):
    return BleuResult(label, bleu.score, str(metric.get_signature()), tuple(bleu.precisions), bleu.bp)


def sacrebleu_score(hypotheses: Sequence[str], references: Sequence[str]) -> BleuResult:
    """sacreBLEU with its defaults (13a tokenization, mixed case, exponential smoothing)."""
    hypotheses, references = _check(hypotheses, references)
    metric = sacrebleu.BLEU()
    return _result(SACREBLEU, metric, metric.corpus_score(hypotheses, [references]))


def paper_tokenize(text: str, lang: str = "de") -> str:
    """Moses tokenization (tokenizer.perl -l LANG) followed by the compound split ``a-b`` ->
    ``a ##AT##-##AT## b``, once, exactly as ``perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'`` does
    (matches do not overlap, so ``a-b-c`` keeps its second hyphen: the paper's numbers were measured so)."""
    return _COMPOUND_HYPHEN.sub(r"\1 ##AT##-##AT## \2", _moses(lang).tokenize(text, return_str=True))


_TOKENIZERS = {}


def _moses(lang):
    if lang not in _TOKENIZERS:
        _TOKENIZERS[lang] = MosesTokenizer(lang=lang)
    return _TOKENIZERS[lang]


def tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str], lang: str = "de") -> BleuResult:
    """The paper's BLEU: ``paper_tokenize`` both sides, then multi-bleu.perl's corpus BLEU
    (whitespace tokens, case-sensitive, no smoothing)."""
    hypotheses, references = _check(hypotheses, references)
    metric = sacrebleu.BLEU(tokenize="none", smooth_method="none", force=True)
    bleu = metric.corpus_score([paper_tokenize(h, lang) for h in hypotheses],
                               [[paper_tokenize(r, lang) for r in references]])
    return _result(TOKENIZED, metric, bleu)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """BLEU of one set of translations, both ways (never compare one with the other)."""

    sacrebleu: BleuResult
    tokenized: BleuResult
    sentences: int

    def lines(self) -> list:
        """Two labelled lines, e.g. ``sacreBLEU = 12.34 (nrefs:1|...)``."""
        return [str(self.sacrebleu), str(self.tokenized)]


def evaluate_translations(hypotheses: Sequence[str], references: Sequence[str],
                          lang: str = "de") -> Evaluation:
    """sacreBLEU and the paper's tokenized compound-split BLEU of ``hypotheses`` (one per reference,
    in order; ``lang`` is the target language, for the Moses tokenizer)."""
    hypotheses, references = _check(hypotheses, references)
    return Evaluation(sacrebleu_score(hypotheses, references),
                      tokenized_bleu(hypotheses, references, lang), len(references))


def translate_and_evaluate(translate_fn, sources: Sequence[str], references: Sequence[str],
                           lang: str = "de", batch_size: int = 32, progress=None):
    """Translates ``sources`` with ``translate_fn`` (tf.string [batch] -> ``{"translations", ...}``:
    ``Translator.translate_text`` or an exported ``serving_default`` signature; see
    ``inference.translate_in_batches``) and scores the output against ``references``.
    Returns ``(Evaluation, hypotheses)``."""
    from keras_transformer.inference import translate_in_batches

    sources, references = list(sources), list(references)
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references.")
    results = translate_in_batches(translate_fn, sources, batch_size, progress)
    hypotheses = [r["translation"] for r in results]
    return evaluate_translations(hypotheses, references, lang), hypotheses
