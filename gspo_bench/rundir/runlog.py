"""What other libraries print while a run trains (lm-eval's and datasets' tqdm bars, their logging,
Python warnings) goes to the run's own `run.log`, not to the console the progress is drawn on."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

LOG_NAME = "run.log"


def _stream_handlers() -> list[logging.StreamHandler[TextIO]]:
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    return [h for lg in loggers for h in lg.handlers  # not files, nor handlers that look sys.stderr up each time
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
            and not isinstance(getattr(type(h), "stream", None), property)]


@contextlib.contextmanager
def library_output(path: Path) -> Iterator[None]:
    """Inside: sys.stderr (where tqdm bars, warnings and logging's last resort write) is `path`
    (appended), and so is every logging handler that wrote to the console; handlers created inside
    (lm-eval makes its own on its first evaluation) write to the console's stderr again afterwards.
    sys.stdout is left alone: the progress display draws there."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stderr = sys.stderr
    console = {id(s) for s in (stderr, sys.stdout, sys.__stderr__, sys.__stdout__)}
    with open(path, "a", buffering=1, encoding="utf-8") as log:
        swapped = [(h, h.stream) for h in _stream_handlers() if id(h.stream) in console]
        for handler, _ in swapped:
            handler.setStream(log)
        try:
            with contextlib.redirect_stderr(log):
                yield
        finally:
            for handler, stream in swapped:
                handler.setStream(stream)
            for handler in _stream_handlers():
                if handler.stream is log:
                    handler.setStream(stderr)
