"""An incremental scanner of the string fields of ONE streaming top-level JSON object.

The model's tool arguments arrive as raw JSON text in arbitrary chunks. For live cards (the edit
card's content, seed §30) we need the *decoded* characters of some string fields as soon as they
arrive, long before the text is complete. `JsonFieldScanner.feed(chunk)` returns `FieldChunk`s:
the decoded characters of top-level string values seen in that chunk, and `done=True` when a value's
closing quote arrived. Escapes (including `\\uXXXX` surrogate pairs) may be split anywhere across
chunks. Nested objects/arrays and non-string values are skipped.

It is a UI decoder, not a validator: on text that is not JSON it stops emitting (the one strict parse
of the complete arguments reports the error). A lone or broken surrogate decodes to U+FFFD here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_PLAIN = re.compile(r'[^"\\]+')
_WS = " \t\r\n"
_HEX = "0123456789abcdefABCDEF"
REPLACEMENT = "\ufffd"

# states (_KEY_NEXT: after a comma, a key must follow; _IN_STRING: inside a key or a value string)
_START, _KEY_OR_END, _KEY_NEXT, _COLON, _VALUE, _SCALAR, _NESTED, _AFTER, _IN_STRING, _DONE, _FAILED = range(11)
# string sub-states
_STR, _ESC, _HEX4, _LOW_BS, _LOW_U, _LOW_HEX4 = range(6)


@dataclass(frozen=True)
class FieldChunk:
    key: str
    text: str
    """Decoded characters of the value (may be empty on the closing chunk)."""
    done: bool = False


class JsonFieldScanner:
    def __init__(self, wanted: frozenset[str] | set[str] | None = None) -> None:
        self.wanted = frozenset(wanted) if wanted is not None else None
        self._state = _START
        self._str_state = _STR
        self._in_key = False
        self._key_parts: list[str] = []
        self._key = ""
        self._hex = ""
        self._high = 0
        self._out: list[str] = []
        self._nest_depth = 0
        self._nest_in_str = False
        self._nest_esc = False

    @property
    def failed(self) -> bool:
        return self._state == _FAILED

    @property
    def finished(self) -> bool:
        return self._state == _DONE

    def feed(self, text: str) -> list[FieldChunk]:
        events: list[FieldChunk] = []
        i, n = 0, len(text)
        while i < n and self._state not in (_FAILED, _DONE):
            st = self._state
            c = text[i]
            if st == _START:
                if c == "{":
                    self._state = _KEY_OR_END
                elif c not in _WS:
                    self._state = _FAILED
                i += 1
            elif st == _KEY_OR_END:
                if c == '"':
                    self._begin_string(key=True)
                elif c == "}":
                    self._state = _DONE
                elif c not in _WS:
                    self._state = _FAILED
                i += 1
            elif st == _COLON:
                if c == ":":
                    self._state = _VALUE
                elif c not in _WS:
                    self._state = _FAILED
                i += 1
            elif st == _VALUE:
                if c == '"':
                    self._begin_string(key=False)
                elif c in "{[":
                    self._state, self._nest_depth = _NESTED, 1
                    self._nest_in_str = self._nest_esc = False
                elif c in ",}]:":
                    self._state = _FAILED
                elif c not in _WS:
                    self._state = _SCALAR
                i += 1
            elif st == _SCALAR:
                if c in _WS:
                    self._state = _AFTER
                elif c == ",":
                    self._state = _KEY_NEXT
                elif c == "}":
                    self._state = _DONE
                i += 1
            elif st == _NESTED:
                self._nested(c)
                i += 1
            elif st == _AFTER:
                if c == ",":
                    self._state = _KEY_NEXT
                elif c == "}":
                    self._state = _DONE
                elif c not in _WS:
                    self._state = _FAILED
                i += 1
            elif st == _KEY_NEXT:
                if c == '"':
                    self._begin_string(key=True)
                elif c not in _WS:
                    self._state = _FAILED
                i += 1
            elif st == _IN_STRING:
                i = self._string(text, i, events)
        if self._out:  # what a value string decoded so far in this chunk
            events.append(FieldChunk(self._key, "".join(self._out)))
            self._out = []
        return events

    # ---- strings --------------------------------------------------------------------------------

    def _begin_string(self, *, key: bool) -> None:
        self._state = _IN_STRING
        self._str_state = _STR
        self._in_key = key
        if key:
            self._key_parts = []

    def _emit_char(self, s: str) -> None:
        if self._in_key:
            self._key_parts.append(s)
        elif self._wants():
            self._out.append(s)

    def _wants(self) -> bool:
        return self.wanted is None or self._key in self.wanted

    def _end_string(self, events: list[FieldChunk]) -> None:
        if self._in_key:
            self._key = "".join(self._key_parts)
            self._state = _COLON
        else:
            if self._wants():
                events.append(FieldChunk(self._key, "".join(self._out), True))
            self._out = []
            self._state = _AFTER

    def _string(self, text: str, i: int, events: list[FieldChunk]) -> int:
        """Consume string characters from text[i:]; returns the next index."""
        n = len(text)
        while i < n:
            ss = self._str_state
            c = text[i]
            if ss == _STR:
                m = _PLAIN.match(text, i)
                if m:
                    self._emit_char(m.group())
                    i = m.end()
                    continue
                i += 1
                if c == '"':
                    self._end_string(events)
                    return i
                self._str_state = _ESC  # c == "\\"
            elif ss == _ESC:
                i += 1
                self._escape(c)
                if self._state == _FAILED:
                    return i
            elif ss in (_HEX4, _LOW_HEX4):
                if c not in _HEX:
                    self._state = _FAILED
                    return i
                self._hex += c
                i += 1
                if len(self._hex) == 4:
                    code = int(self._hex, 16)
                    self._hex = ""
                    if ss == _HEX4:
                        self._code_point(code)
                    else:
                        self._low(code)
            elif ss == _LOW_BS:
                if c == "\\":
                    self._str_state = _LOW_U
                    i += 1
                else:  # a lone high surrogate; c is an ordinary string character: re-read it
                    self._emit_char(REPLACEMENT)
                    self._str_state = _STR
            elif ss == _LOW_U:
                i += 1
                if c == "u":
                    self._str_state = _LOW_HEX4
                else:  # lone high surrogate followed by another escape
                    self._emit_char(REPLACEMENT)
                    self._escape(c)
                    if self._state == _FAILED:
                        return i
        return i

    def _escape(self, c: str) -> None:
        if c == "u":
            self._str_state, self._hex = _HEX4, ""
        elif c in _ESCAPES:
            self._emit_char(_ESCAPES[c])
            self._str_state = _STR
        else:
            self._state = _FAILED

    def _code_point(self, code: int) -> None:
        if 0xD800 <= code < 0xDC00:
            self._high = code
            self._str_state = _LOW_BS
            return
        self._emit_char(REPLACEMENT if 0xDC00 <= code < 0xE000 else chr(code))
        self._str_state = _STR

    def _low(self, code: int) -> None:
        if 0xDC00 <= code < 0xE000:
            self._emit_char(chr(0x10000 + ((self._high - 0xD800) << 10) + (code - 0xDC00)))
            self._str_state = _STR
        else:  # the high surrogate was lone; this escape stands on its own
            self._emit_char(REPLACEMENT)
            self._code_point(code)

    # ---- skipped values -------------------------------------------------------------------------

    def _nested(self, c: str) -> None:
        if self._nest_in_str:
            if self._nest_esc:
                self._nest_esc = False
            elif c == "\\":
                self._nest_esc = True
            elif c == '"':
                self._nest_in_str = False
        elif c == '"':
            self._nest_in_str = True
        elif c in "{[":
            self._nest_depth += 1
        elif c in "}]":
            self._nest_depth -= 1
            if self._nest_depth == 0:
                self._state = _AFTER

