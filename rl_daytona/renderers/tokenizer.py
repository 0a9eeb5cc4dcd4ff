"""Loading a model's tokenizer the Hugging Face way: a hub name (through its cache) or a local folder.

Invariant: `load_tokenizer` returns a transformers tokenizer or raises `TokenizerLoadError` with
one line saying what was tried and how to fix it (a folder that does not exist, a name neither
cached nor reachable, a folder without tokenizer files). transformers is imported here only,
and without torch (it loads tokenizers without it).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any


class TokenizerLoadError(ValueError):
    """The tokenizer could not be loaded (the message is one line with the fix)."""


def load_tokenizer(name_or_path: str | os.PathLike[str]) -> Any:
    """`AutoTokenizer.from_pretrained(name_or_path)`: a local folder, or a hub name via HF's cache.

    Set HF_HUB_OFFLINE=1 to use the cache only; HF_TOKEN is read by huggingface_hub itself."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" notice
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # "PyTorch was not found" is expected: only the tokenizer is used
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.set_verbosity_error()
    text = str(name_or_path)
    looks_local = text.startswith((".", "/", "~")) or Path(text).expanduser().exists()
    if looks_local and not Path(text).expanduser().is_dir():
        raise TokenizerLoadError(f"tokenizer folder {text} does not exist (pass --tokenizer a folder holding "
                                 "tokenizer.json / tokenizer_config.json)")
    if looks_local:
        return _load(AutoTokenizer, str(Path(text).expanduser()), f"folder {text!r}", local_files_only=True)
    try:
        return AutoTokenizer.from_pretrained(text, local_files_only=True)  # the HF cache first, no network
    except Exception:  # noqa: BLE001 - not cached: try the hub below
        pass
    if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True") or not _hub_reachable():
        raise TokenizerLoadError(f"the tokenizer of model {text!r} is not in the Hugging Face cache and the hub "
                                 f"cannot be reached; {FIX}")
    return _load(AutoTokenizer, text, f"model {text!r}")


FIX = ("download it once with network (it is cached under ~/.cache/huggingface) or pass --tokenizer PATH to a "
       "local folder holding tokenizer.json and tokenizer_config.json")


def _load(auto: Any, name: str, what: str, **kw: Any) -> Any:
    try:
        return auto.from_pretrained(name, **kw)
    except Exception as exc:  # noqa: BLE001 - hub, network and file errors all become one line
        reason = " ".join(str(exc).split())[:240]
        raise TokenizerLoadError(f"could not load the tokenizer of {what} ({type(exc).__name__}: {reason}); "
                                 f"{FIX}") from None


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub's host answers a TCP connect (so a missing network fails fast, not after retries)."""
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=timeout).close()
    except OSError:
        return False
    return True
