"""Exceptions raised by hf-textdp.

Every error a user can cause is an :class:`HfTextDPError`, which is a :class:`ValueError`. Where a
builtin meaning fits, the class inherits from it too, so ``except FileNotFoundError`` still works::

    ValueError
    └── HfTextDPError
        ├── InvalidParameterError            a parameter value is not allowed
        │   ├── UnknownMechanismError        mechanism name not registered
        │   ├── UnknownPostprocessError      post-processing name not registered
        │   ├── UnknownOptionError           an option no mechanism or step declares
        │   └── ParameterTypeError (+TypeError)  a parameter has the wrong type
        ├── ModelNotFoundError (+FileNotFoundError)  ``model=`` cannot be resolved offline
        ├── VectorFileError                  a static word-vector file is malformed
        ├── TokenizerNotSupportedError       the tokenizer cannot be used
        ├── InvalidRowError                  a row's text is not a string
        ├── InputFileError                   an input file is empty, not UTF-8 or not parseable
        ├── ColumnNotFoundError (+KeyError)  the text or id column does not exist
        ├── NumericalRangeError              noise overflowed (epsilon far too small)
        ├── OutputExistsError (+FileExistsError)  the output exists and ``overwrite`` is off
        ├── OutputNotWritableError (+PermissionError)  the output (or its folder) cannot be written
        ├── ResumeError                      ``resume`` cannot continue the partial run it found
        ├── OriginalTextError                publishing an output that holds the original text, not allowed
        └── MissingExtraError (+ImportError) an optional dependency is not installed

Messages name the parameter (or the row index and column), the value, and what is allowed. They
never contain the text being privatized, token ids of a row, or the seed.
"""

from __future__ import annotations

import os


__all__ = [
    "HfTextDPError",
    "InvalidParameterError",
    "UnknownMechanismError",
    "UnknownPostprocessError",
    "UnknownOptionError",
    "ParameterTypeError",
    "ModelNotFoundError",
    "VectorFileError",
    "TokenizerNotSupportedError",
    "InvalidRowError",
    "InputFileError",
    "ColumnNotFoundError",
    "NumericalRangeError",
    "OutputExistsError",
    "OutputNotWritableError",
    "ResumeError",
    "OriginalTextError",
    "MissingExtraError",
    "OutputChangedError",
    "HubUnreachableError",
    "unexpected_error_line",
]


def unexpected_error_line(err: BaseException) -> str:
    """The one line the CLI prints for an error that is not an :class:`HfTextDPError`: its type, and for an
    ``OSError`` its reason and file; never another library's message, which may quote the data being read."""
    if isinstance(err, OSError) and err.strerror:
        where = f" ({os.fsdecode(err.filename)!r})" if err.filename is not None else ""
        return f"{type(err).__name__}: {err.strerror}{where}"
    return (
        f"unexpected {type(err).__name__}; its message is not shown, as it may quote the data (rerun with --debug "
        "to see it)"
    )


class HfTextDPError(ValueError):
    """Base class of every error a user of hf-textdp can cause."""


class _PlainMessage(HfTextDPError):
    """``str()`` is the message, not the builtin's format (KeyError's repr, OSError's (errno, strerror))."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidParameterError(HfTextDPError):
    """A parameter has a value that is not allowed."""


class UnknownMechanismError(InvalidParameterError):
    """The mechanism name is not registered."""


class UnknownPostprocessError(InvalidParameterError):
    """The post-processing name is not registered."""


class UnknownOptionError(InvalidParameterError):
    """An option was given that neither the mechanism nor the post-processing step declares."""


class ParameterTypeError(InvalidParameterError, TypeError):
    """A parameter has the wrong type."""


class ModelNotFoundError(_PlainMessage, FileNotFoundError):
    """``model=`` could not be resolved to a local folder, file or cached hub model."""


class VectorFileError(HfTextDPError):
    """A static word-vector file (GloVe / word2vec text) is malformed."""


class TokenizerNotSupportedError(HfTextDPError):
    """The tokenizer cannot be used for privatization."""


class InvalidRowError(HfTextDPError):
    """A row of the dataset holds a value that cannot be privatized (e.g. ``None`` as text)."""


class InputFileError(HfTextDPError):
    """An input file cannot be read as a dataset: it is empty, not UTF-8, or not valid JSON Lines/CSV/Parquet.

    The message names the file and, where known, the line.
    """


class ColumnNotFoundError(_PlainMessage, KeyError):
    """A column named by the user does not exist."""


class NumericalRangeError(HfTextDPError):
    """The noise overflowed to a non-finite value (epsilon is far too small)."""


class OutputExistsError(_PlainMessage, FileExistsError):
    """The output path exists and ``overwrite`` was not set, or it is the input itself."""


class OutputNotWritableError(_PlainMessage, PermissionError):
    """The output path, or the folder that would hold it, cannot be written."""


class OutputChangedError(HfTextDPError):
    """A saved output no longer holds what its privacy report was written for (its content hash differs)."""


class HubUnreachableError(_PlainMessage, ConnectionError):
    """The Hugging Face Hub could not be reached (offline, ``HF_HUB_OFFLINE=1``, a name or a connection failure)."""


class ResumeError(HfTextDPError):
    """``resume=True`` found a partial run made with another config, input or shard size."""


class OriginalTextError(HfTextDPError):
    """``push_to_hub`` found ``*_original`` columns (the input text, not private) and was not told to allow them."""


class MissingExtraError(HfTextDPError, ImportError):
    """An optional dependency is missing; the message gives the ``pip install`` line."""
