"""Model-based detectors: a spaCy pipeline's entities and Presidio's analyzer (docs/mechanisms/selective.md §3).

Both are optional extras, imported only when a detector names them, and both read the whole text (a word's
label depends on the words around it). A spaCy entity loses the cue words of the ``context`` rule that open or
close it (NER often takes ``iban DE89…`` or ``ref A-12`` as one organisation): they label a value, and selecting
them cost a tenth of the other tokens of the rows holding IBANs. Batches go through ``nlp.pipe`` and Presidio's
``BatchAnalyzerEngine``. Nothing is downloaded: a spaCy pipeline must be installed or be a folder. Presidio's
NLP engine runs ``en_core_web_lg`` where it is installed, otherwise the best installed English pipeline with NER
(:func:`~hf_textdp.sensitive.defaults.best_english_ner`); the report names the one it used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import MissingExtraError, ModelNotFoundError
from .defaults import NER_INSTALL, english_ner_pipelines
from .rules import trim_labels
from .spans import RowSpans


__all__ = ["SpacyDetector", "PresidioDetector"]

_BATCH = 256  # texts per nlp.pipe batch: spaCy's default is 1000, smaller keeps memory flat on long texts
PRESIDIO_SPACY_MODEL = "en_core_web_lg"  # the pipeline Presidio's default AnalyzerEngine loads
#: components whose output NER never reads (part-of-speech tags, lemmas): skipped, which leaves the entities
#: unchanged (the parser stays: its sentence boundaries bound the entities) and saves about a quarter of the time
_NOT_FOR_NER = ("tagger", "morphologizer", "attribute_ruler", "lemmatizer")


def presidio_pipeline() -> str | None:
    """The spaCy pipeline Presidio runs here: ``en_core_web_lg`` if installed, else the best English one with NER."""
    names = [n for n, _ in english_ner_pipelines()]
    return PRESIDIO_SPACY_MODEL if PRESIDIO_SPACY_MODEL in names else (names[0] if names else None)


def _import_spacy(detector: str) -> Any:
    try:
        import spacy
    except ImportError as err:
        raise MissingExtraError(
            f'sensitive["detectors"]: {detector!r} needs spaCy, which is not installed: '
            "pip install 'hf-textdp[spacy]'."
        ) from err
    return spacy


@dataclass
class SpacyDetector:
    """Entities of a spaCy pipeline (an installed package name or a pipeline folder) whose label is in ``labels``."""

    name: str
    labels: tuple[str, ...]
    reads_context: bool = True
    _nlp: Any = field(default=None, repr=False)

    @property
    def pipeline(self) -> str:
        return self.name[len("spacy:") :]

    def _load(self) -> Any:
        if self._nlp is None:
            spacy = _import_spacy(self.name)
            try:
                self._nlp = spacy.load(self.pipeline, disable=_NOT_FOR_NER)
            except OSError as err:
                raise ModelNotFoundError(
                    f'sensitive["detectors"]: {self.name!r}: no spaCy pipeline {self.pipeline!r} is installed and '
                    f"no such folder exists (install one with `python -m spacy download {self.pipeline}`, or give "
                    "a pipeline folder)."
                ) from err
        return self._nlp

    def detect(self, texts: Sequence[str]) -> RowSpans:
        nlp = self._load()
        labels = set(self.labels)
        per_row = []
        for text, doc in zip(texts, nlp.pipe(list(texts), batch_size=_BATCH), strict=True):
            found = [trim_labels(text, e.start_char, e.end_char) for e in doc.ents if e.label_ in labels]
            per_row.append([(a, b) for a, b in found if b > a])
        return RowSpans.from_lists(per_row)


@dataclass
class PresidioDetector:
    """Every entity Presidio's default ``AnalyzerEngine`` finds (English), batched by ``BatchAnalyzerEngine``."""

    name: str = "presidio"
    reads_context: bool = True
    _engine: Any = field(default=None, repr=False)

    def _load(self) -> Any:
        if self._engine is None:
            try:
                from presidio_analyzer import AnalyzerEngine, BatchAnalyzerEngine
            except ImportError as err:
                raise MissingExtraError(
                    "sensitive[\"detectors\"]: 'presidio' needs presidio-analyzer, which is not installed: "
                    "pip install 'hf-textdp[presidio]'."
                ) from err
            from presidio_analyzer.nlp_engine import NlpEngineProvider

            _import_spacy(self.name)
            # Presidio downloads a missing spaCy pipeline; hf-textdp never downloads: it names an installed one
            pipeline = presidio_pipeline()
            if pipeline is None:
                raise MissingExtraError(
                    "sensitive[\"detectors\"]: 'presidio' needs an English spaCy pipeline with NER, and none is "
                    f"installed: {NER_INSTALL}."
                )
            models = [{"lang_code": "en", "model_name": pipeline}]
            nlp = NlpEngineProvider(nlp_configuration={"nlp_engine_name": "spacy", "models": models}).create_engine()
            analyzer = AnalyzerEngine(nlp_engine=nlp, supported_languages=["en"])
            self._engine = BatchAnalyzerEngine(analyzer_engine=analyzer)
        return self._engine

    def detect(self, texts: Sequence[str]) -> RowSpans:
        engine = self._load()
        results = engine.analyze_iterator(list(texts), language="en", batch_size=_BATCH)
        per_row = [[(int(r.start), int(r.end)) for r in found if r.end > r.start] for found in results]
        return RowSpans.from_lists(per_row)
