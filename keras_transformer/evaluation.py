"""BLEU, measured two ways and always labelled, and chrF beside it.

- ``sacrebleu_score``: sacreBLEU on detokenized text (its signature travels with the number). This is
  the comparable figure. Its tokenizer is the one sacreBLEU chooses for the target language (13a; for
  Chinese ``zh``, for Japanese ``ja-mecab``, for Korean ``ko-mecab``); where the language is not known
  (your own files), Chinese and Japanese references, written without spaces between words, are
  recognised by their script (``written_language``): under 13a a whole sentence of them would be
  one word, and any translation but an exact one would score near 0.
- ``chrf_score``: sacreBLEU's chrF2 (character 6-gram F-score, recall weighted twice) on the same
  detokenized text, with its signature. On short sentences, where one wrong word leaves BLEU few
  n-grams to count, it is the steadier second opinion.
- ``tokenized_bleu``: how the paper's 27.3 / 28.4 (Table 2) were computed: Moses-tokenized hypothesis and
  reference, hyphenated compounds split into ``Welt ##AT##-##AT## Meister`` (tensor2tensor's
  ``get_ende_bleu.sh``), then multi-bleu.perl's BLEU (no smoothing). It is usually higher than sacreBLEU for
  the same output (fairseq reports 29.3 tokenized vs 28.6 sacreBLEU for one model), so it is never printed
  without its label.

Beside every score go its **floors** on the same sentences (:func:`floors`): copying the source, and a
translation memory (the target of the TF-IDF-nearest training source: for the main job, the German of
the nearest English sentence). A model below the memory has not learned to translate, whatever its
BLEU (:func:`verdict`, on sacreBLEU); the verdict also counts the test sources that are training
sources too (exactly), whose translations a memory and a model may have seen.
"""

import dataclasses
import os
import re
from typing import Optional, Sequence, Tuple

import sacrebleu
from sacremoses import MosesTokenizer

SACREBLEU = "sacreBLEU"
CHRF = "chrF2"  # sacreBLEU's name for its default CHRF(): character order 6, no words, beta 2
TOKENIZED = "tokenized BLEU (Moses + compound split, the paper's)"

_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)")


@dataclasses.dataclass(frozen=True)
class Score:
    """One corpus score with the label and the sacreBLEU signature that say how it was measured."""

    label: str
    score: float
    signature: str

    def __str__(self):
        return f"{self.label} = {self.score:.2f} ({self.signature})"


@dataclasses.dataclass(frozen=True)
class BleuResult(Score):
    precisions: tuple
    brevity_penalty: float


def _check(hypotheses, references):
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"Scoring needs one hypothesis per reference: got {len(hypotheses)} "
                         f"hypotheses and {len(references)} references.")
    if not references:
        raise ValueError("A score of an empty test set is undefined: no references given.")
    return hypotheses, references


def _result(label, metric, bleu):
    return BleuResult(label, bleu.score, str(metric.get_signature()), tuple(bleu.precisions), bleu.bp)


# Letters of the scripts written without spaces between words: Chinese characters (CJK unified
# ideographs, extension A, compatibility ideographs) and Japanese kana (hiragana, katakana, their
# phonetic extensions, half-width katakana).
_HAN = re.compile("[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff]")
_KANA = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_LETTER = re.compile(r"[^\W\d_]")
# Japanese text mixes kana into its Chinese characters; Chinese text has none.
KANA_SHARE_OF_JAPANESE = 0.05


def written_language(texts: Sequence[str]) -> Optional[str]:
    """"zh" or "ja" when most letters of ``texts`` are Chinese characters or kana (with kana among
    them: Japanese), else None: a script whose words have spaces between them, which sacreBLEU's
    default tokenizer splits."""
    text = "\n".join(texts)
    letters, han, kana = (len(pattern.findall(text)) for pattern in (_LETTER, _HAN, _KANA))
    if not letters or han + kana <= letters / 2:
        return None
    return "ja" if kana > KANA_SHARE_OF_JAPANESE * letters else "zh"


def sacrebleu_score(hypotheses: Sequence[str], references: Sequence[str],
                    lang: Optional[str] = None) -> BleuResult:
    """sacreBLEU with its defaults (mixed case, exponential smoothing) and the tokenizer it chooses
    for the target language ``lang`` (None: not known; then ``written_language`` of the
    references). A tokenizer whose package is missing (ja-mecab, ko-mecab) is a ValueError
    naming what to install."""
    hypotheses, references = _check(hypotheses, references)
    language = lang or written_language(references) or ""
    try:
        metric = sacrebleu.BLEU(trg_lang=language)
    except (ImportError, RuntimeError):  # sacreBLEU's message spans lines; this says the same
        raise ValueError(f"sacreBLEU's tokenizer for the target language {language!r} needs "
                         f"packages that are not installed: pip install 'sacrebleu[{language}]'"
                         ) from None
    return _result(SACREBLEU, metric, metric.corpus_score(hypotheses, [references]))


def chrf_score(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """sacreBLEU's chrF with its defaults (chrF2: character 6-grams, no word n-grams, mixed case,
    whitespace ignored)."""
    hypotheses, references = _check(hypotheses, references)
    metric = sacrebleu.CHRF()
    chrf = metric.corpus_score(hypotheses, [references])
    return Score(CHRF, chrf.score, str(metric.get_signature()))


def paper_tokenize(text: str, lang: str = "de") -> str:
    r"""Moses tokenization (tokenizer.perl -l LANG) followed by the compound split ``a-b`` ->
    ``a ##AT##-##AT## b``, once, exactly as ``perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'`` does
    (matches do not overlap, so ``a-b-c`` keeps its second hyphen: the paper's numbers were measured so)."""
    return _COMPOUND_HYPHEN.sub(r"\1 ##AT##-##AT## \2", _moses(lang).tokenize(text, return_str=True))


_TOKENIZERS = {}


def _moses(lang):
    if lang not in _TOKENIZERS:
        _TOKENIZERS[lang] = MosesTokenizer(lang=lang)
    return _TOKENIZERS[lang]


def tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str],
                   lang: Optional[str] = None) -> BleuResult:
    """The paper's BLEU: ``paper_tokenize`` both sides, then multi-bleu.perl's corpus BLEU
    (whitespace tokens, case-sensitive, no smoothing). ``lang``: the target language, whose Moses
    rules are used (None, not known: the paper's, German; the signature names them)."""
    hypotheses, references = _check(hypotheses, references)
    lang = lang or "de"
    metric = sacrebleu.BLEU(tokenize="none", smooth_method="none", force=True)
    bleu = metric.corpus_score([paper_tokenize(h, lang) for h in hypotheses],
                               [[paper_tokenize(r, lang) for r in references]])
    result = _result(TOKENIZED, metric, bleu)
    # sacreBLEU's "tok:none" says only that it did not tokenize again: name what did.
    return dataclasses.replace(result, signature=result.signature.replace(
        "tok:none", f"tok:moses-{lang}+compound-split"))


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """BLEU of one set of translations, both ways (never compare one with the other), and chrF."""

    sacrebleu: BleuResult
    tokenized: BleuResult
    chrf: Score
    sentences: int

    def lines(self) -> list:
        """Three labelled lines, e.g. ``sacreBLEU = 12.34 (nrefs:1|...)``: sacreBLEU, the
        tokenized BLEU, chrF."""
        return [str(self.sacrebleu), str(self.tokenized), str(self.chrf)]


def evaluate_translations(hypotheses: Sequence[str], references: Sequence[str],
                          lang: Optional[str] = None) -> Evaluation:
    """sacreBLEU, the paper's tokenized compound-split BLEU and chrF of ``hypotheses`` (one per
    reference, in order; ``lang`` is the target language, None if not known)."""
    hypotheses, references = _check(hypotheses, references)
    return Evaluation(sacrebleu_score(hypotheses, references, lang),
                      tokenized_bleu(hypotheses, references, lang),
                      chrf_score(hypotheses, references), len(references))


def translate_and_evaluate(translate_fn, sources: Sequence[str], references: Sequence[str],
                           lang: Optional[str] = None, batch_size: Optional[int] = None,
                           progress=None):
    """Translates ``sources`` with ``translate_fn`` (tf.string [batch] -> ``{"translations", ...}``:
    ``Translator.translate_text`` or an exported ``serving_default`` signature; see
    ``inference.translate_in_batches``, in batches of ``batch_size`` sentences, by default
    ``inference.BATCH_SIZE``) and scores the output against ``references``.
    Returns ``(Evaluation, hypotheses)``."""
    from keras_transformer.inference import BATCH_SIZE, translate_in_batches

    sources, references = list(sources), list(references)
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references.")
    results = translate_in_batches(translate_fn, sources, batch_size or BATCH_SIZE, progress)
    hypotheses = [r["translation"] for r in results]
    return evaluate_translations(hypotheses, references, lang), hypotheses


# --- floors: what a model must beat on the same sentences ---------------------------------------

COPY = "copy the source"
MEMORY = "translation memory"
# How many training sources show the memory their script.
SCRIPT_SAMPLE = 2000
# The largest corpus whose memory keeps every n-gram (TranslationMemory), and the columns the
# n-grams of a larger one are hashed into.
EXACT_PAIRS = 500_000
HASHED_FEATURES = 2 ** 24
# Sources a thread looks up at a time, and the cosines (float64) all the threads' batches may hold
# at once.
MAX_BATCH, SCORES_AT_ONCE = 256, 2 ** 25


def copy_floor(sources: Sequence[str]) -> list:
    """The sources as their own translations: names, menus and code pass through untranslated."""
    return list(sources)


class TranslationMemory:
    """Retrieval instead of translation: the target of the training pair whose source is nearest
    by TF-IDF cosine (scikit-learn's ``TfidfVectorizer`` over word unigrams and bigrams, rows
    L2-normalised, so a sparse dot product is the cosine). Case is kept: in documentation the
    capitalised words are the names of menus and dialogs, and matching them retrieves better
    (chosen on the LibreOffice dev split, against lower-casing and sublinear counts). Sources in a
    script without spaces between words (``written_language``) are matched by character unigrams
    and bigrams instead, the length of most Chinese words: as words, a whole sentence would be one.

    Above ``EXACT_PAIRS`` training pairs (WMT's millions) the n-grams are hashed into
    ``HASHED_FEATURES`` columns (``HashingVectorizer``, then the same TF-IDF weights): the exact
    vectorizer keeps every distinct n-gram as a Python string, and its memory grows past a
    machine's with the corpus, while the hashed one's stays that of the sparse matrix. Two n-grams
    meet in one column only by a hash collision, which at this width is rare; as the exact one
    does, a source's n-grams that no training source has are left out of its vector.
    """

    def __init__(self, train_pairs: Sequence[Tuple[str, str]]):
        from sklearn.feature_extraction.text import (HashingVectorizer, TfidfTransformer,
                                                     TfidfVectorizer)

        train_pairs = list(train_pairs)
        if not train_pairs:
            raise ValueError("a translation memory needs training pairs; got none.")
        self._targets = [target for _, target in train_pairs]
        if written_language([source for source, _ in train_pairs[:SCRIPT_SAMPLE]]):
            options = dict(analyzer="char", ngram_range=(1, 2), lowercase=False)
        else:
            options = dict(ngram_range=(1, 2), lowercase=False, token_pattern=r"(?u)\b\w+\b")
        sources = [source for source, _ in train_pairs]
        if len(train_pairs) > EXACT_PAIRS:
            hasher = HashingVectorizer(n_features=HASHED_FEATURES, alternate_sign=False,
                                       norm=None, **options)
            weights = TfidfTransformer()  # TfidfVectorizer's: smoothed idf, l2-normalised rows
            counts = hasher.transform(sources)
            seen = counts.getnnz(axis=0) > 0

            def vectorize(texts):
                counts = hasher.transform(texts)
                counts.data *= seen[counts.indices]
                counts.eliminate_zeros()
                return weights.transform(counts)

            matrix, self._vectorize = weights.fit_transform(counts), vectorize
        else:
            vectorizer = TfidfVectorizer(**options)
            matrix, self._vectorize = vectorizer.fit_transform(sources), vectorizer.transform
        self._columns = matrix.T.tocsr()  # n-grams x pairs: the side a product with sources reads

    def nearest(self, sources: Sequence[str]) -> Tuple[list, list]:
        """(index of the nearest training pair, its cosine) per source. Ties go to the earliest
        pair; a source without any known word has cosine 0 and gets pair 0."""
        from concurrent.futures import ThreadPoolExecutor

        # A source's cosines with every pair are one dense row (common words reach nearly all
        # pairs), so a batch has as many sources as keep SCORES_AT_ONCE of them over all the
        # threads; a thread on every CPU, since scipy's sparse products release the GIL.
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
        batch_size = max(1, min(MAX_BATCH, SCORES_AT_ONCE // (len(self._targets) * threads)))
        batches = [list(sources[start:start + batch_size])
                   for start in range(0, len(sources), batch_size)]
        with ThreadPoolExecutor(threads) as pool:
            found = list(pool.map(self._nearest_of_batch, batches))
        return ([i for indices, _ in found for i in indices],
                [s for _, similarities in found for s in similarities])

    def _nearest_of_batch(self, sources):
        import numpy as np

        scores = (self._vectorize(sources) @ self._columns).toarray()
        best = np.argmax(scores, axis=1)  # the first maximum: the earliest pair on ties
        return ([int(i) for i in best],
                [float(s) for s in scores[np.arange(len(best)), best]])

    def lookup(self, sources: Sequence[str]) -> list:
        """The retrieved translation of every source."""
        return [self._targets[i] for i in self.nearest(sources)[0]]


@dataclasses.dataclass(frozen=True)
class Floors:
    """BLEU and chrF of the two baselines on the model's own test sentences."""

    copy: Evaluation
    translation_memory: Evaluation
    # how many of the test sentences' sources are, exactly, sources of training pairs too (a
    # memory, and a model, may have seen their translations)
    sources_in_training: int = 0

    def to_dict(self) -> dict:
        """The two floors' scores, by floor."""
        return {name: {"sacrebleu": e.sacrebleu.score, "tokenized_bleu": e.tokenized.score,
                       "chrf": e.chrf.score}
                for name, e in (("copy", self.copy), ("translation_memory", self.translation_memory))}


def floors(sources: Sequence[str], references: Sequence[str],
           train_pairs: Sequence[Tuple[str, str]], lang: Optional[str] = None) -> Floors:
    """Copy and translation-memory BLEU (both ways) and chrF on ``sources``/``references``."""
    memory = TranslationMemory(train_pairs).lookup(list(sources))
    wanted = set(sources)  # the test's: a set of a large training corpus's sources would be large
    trained = {source for source, _ in train_pairs if source in wanted}
    return Floors(evaluate_translations(copy_floor(sources), references, lang),
                  evaluate_translations(memory, references, lang),
                  sum(source in trained for source in sources))


def floor_lines(result: Evaluation, floors: Floors) -> list:
    """The model's BLEU and chrF and the two floors', aligned, highest first."""
    rows = [("model", result), (MEMORY, floors.translation_memory), (COPY, floors.copy)]
    return [f"{name:<19} sacreBLEU {e.sacrebleu.score:6.2f}   tokenized BLEU {e.tokenized.score:6.2f}"
            f"   {CHRF} {e.chrf.score:6.2f}" for name, e in rows]


def verdict(result: Evaluation, floors: Floors) -> str:
    """One line: has the model learned to translate (beaten the translation memory)?"""
    score = result.sacrebleu.score
    memory, copy = floors.translation_memory.sacrebleu.score, floors.copy.sacrebleu.score
    seen = floors.sources_in_training
    overlap = (f" {seen:,} of the {result.sentences:,} test sources "
               f"({seen / max(result.sentences, 1):.1%}) are training sources too."
               if seen else " No test source is a training source.")
    if score >= memory:
        return (f"verdict: {score - memory:.2f} sacreBLEU above the translation memory: the model "
                f"translates beyond looking sentences up.{overlap}")
    below_copy = f", and below copying the source ({copy:.2f})" if score < copy else ""
    return (f"verdict: {score:.2f} sacreBLEU, {memory - score:.2f} below the translation memory "
            f"({memory:.2f}){below_copy}: the model has not learned to translate yet; train "
            f"longer.{overlap}")
