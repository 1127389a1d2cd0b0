"""ANSI colours through colorama, and only when asked: `--color always`, or
`auto` on a terminal (and NO_COLOR unset)."""

from __future__ import annotations

import os
from typing import TextIO


def wanted(mode: str, stream: TextIO) -> bool:
    if mode == "always":
        return True
    if mode == "never":
        return False
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def enable_windows() -> None:
    """On Windows consoles, teach the terminal ANSI codes (no-op elsewhere)."""
    import colorama

    colorama.just_fix_windows_console()


class Palette:
    def __init__(self, on: bool):
        self.on = on
        if on:
            from colorama import Fore, Style

            self._codes = {
                "bold": Style.BRIGHT,
                "red": Fore.RED + Style.BRIGHT,
                "yellow": Fore.YELLOW + Style.BRIGHT,
                "cyan": Fore.CYAN,
                "blue": Fore.BLUE + Style.BRIGHT,
                "dim": Style.DIM,
            }
            self._reset = Style.RESET_ALL

    def __call__(self, style: str, text: str) -> str:
        if not self.on:
            return text
        return f"{self._codes[style]}{text}{self._reset}"

    def severity(self, severity: str, text: str) -> str:
        return self({"error": "red", "warning": "yellow"}.get(severity, "cyan"), text)
