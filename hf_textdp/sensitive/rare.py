"""The public-rarity detector ``rare``: words that English text rarely holds (docs/mechanisms/selective.md §3).

A word is selected when its Zipf frequency in ``wordfreq``'s English table (log10 of its occurrences per 10⁹ words
of running text, from Wikipedia, subtitles, news, books, web text and social media; Speer 2022) is below the
threshold (``"rare:ZIPF"``; default :data:`DEFAULT_ZIPF`): a high-recall backstop for the unusual names, handles
and places NER misses. The table is public and fixed; nothing is learnt from the input, so whether a word is
selected depends on the word alone. Words are runs of letters (with inner apostrophes or hyphens); words with
digits are the rules' (``number``, ``id``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import MissingExtraError
from .spans import RowSpans


__all__ = ["RareDetector", "DEFAULT_ZIPF", "zipf_lookup"]

#: the default threshold: words rarer than about 0.03 per million words of English (set on the tuning set of
#: issue 54: 2.5 and 2.0 selected 10 % and 6.5 % of the other tokens and found no identifier more)
DEFAULT_ZIPF = 1.5
_WORD = re.compile(r"[^\W\d_]{2,}(?:['’-][^\W\d_]+)*")


def zipf_lookup(detector: str) -> Callable[[str, str], float]:
    """wordfreq's ``zipf_frequency`` (``word, lang -> Zipf``), or the error naming the extra that installs it."""
    try:
        from wordfreq import zipf_frequency
    except ImportError as err:
        raise MissingExtraError(
            f'sensitive["detectors"]: {detector!r} reads wordfreq\'s English frequencies, which are not '
            "installed: pip install 'hf-textdp[ner]'."
        ) from err
    lookup: Callable[[str, str], float] = zipf_frequency
    return lookup


@dataclass
class RareDetector:
    """Words below a Zipf frequency (module docstring); ``name`` is ``"rare"`` or ``"rare:ZIPF"``."""

    name: str = "rare"
    reads_context: bool = False
    _zipf: dict[str, float] = field(default_factory=dict, repr=False)

    @property
    def threshold(self) -> float:
        return float(self.name[len("rare:") :]) if self.name.startswith("rare:") else DEFAULT_ZIPF

    def detect(self, texts: Sequence[str]) -> RowSpans:
        zipf_frequency = zipf_lookup(self.name)
        cache, limit = self._zipf, self.threshold
        per_row: list[list[tuple[int, int]]] = []
        for text in texts:
            spans = []
            for m in _WORD.finditer(text):
                word = m.group()
                z = cache.get(word)
                if z is None:
                    z = cache[word] = float(zipf_frequency(word, "en"))
                if z < limit:
                    spans.append(m.span())
            per_row.append(spans)
        return RowSpans.from_lists(per_row)
