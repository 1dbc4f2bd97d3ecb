"""A conservative split of a shell command line into simple commands and word tokens.

It fills `ShellArgs.simple_commands` and `ShellArgs.parsing_result` (peers send the command and its
word tokens). The client may use them for allow-list decisions, so anything this small parser does
not fully understand (subshells, command substitution, multi-line scripts, unbalanced quotes) is
reported as `parsing_failed`, never guessed.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from byok.proto import agent_pb2 as apb

_P = apb.ShellCommandParsingResult
_SEPARATORS = {"&&", "||", ";", "|", "&", "|&", ";;"}
_REDIRECT = re.compile(r"^(?:&>>?|[<>]+[&|]?|>&|<&)$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_UNSUPPORTED = ("\n", "(", ")", "{", "}")
_SUBSTITUTION = ("$(", "`", "<(", ">(")


@dataclass
class ParsedCommand:
    simple_commands: list[str] = field(default_factory=list)
    result: apb.ShellCommandParsingResult = field(default_factory=apb.ShellCommandParsingResult)
    has_input_redirect: bool = False
    has_output_redirect: bool = False


def parse_command(command: str) -> ParsedCommand:
    parsed = ParsedCommand()
    r = parsed.result
    r.has_command_substitution = any(s in command for s in _SUBSTITUTION)
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes
        tokens = None
    if tokens is None or r.has_command_substitution or any(t in _UNSUPPORTED for t in tokens or []) \
            or "\n" in command.strip():
        r.parsing_failed = True
        parsed.simple_commands = [command]
        return parsed

    words: list[str] = []
    pending_redirect: _P.Redirect | None = None

    def close() -> None:
        if words:
            name_at = next((i for i, w in enumerate(words) if not _ASSIGNMENT.match(w)), len(words) - 1)
            full = shlex.join(words)
            r.executable_commands.add(name=words[name_at], full_text=full,
                                      args=[_P.ExecutableCommandArg(type="word", value=w) for w in words[name_at + 1:]])
            parsed.simple_commands.append(full)
            words.clear()

    for token in tokens:
        if pending_redirect is not None:
            pending_redirect.target_text = token
            pending_redirect.target_node_type = "word"
            pending_redirect = None
        elif token in _SEPARATORS:
            close()
        elif _REDIRECT.match(token):
            r.has_redirects = True
            pending_redirect = r.redirects.add(operator=token)
            if words and words[-1].isdigit() and words[-1] + token in command:  # "2>": an fd, not a word
                pending_redirect.destination_fds.append(int(words.pop()))
            if "<" in token:
                parsed.has_input_redirect = True
            if ">" in token:
                parsed.has_output_redirect = True
        else:
            words.append(token)
    close()
    if r.redirects:
        r.all_redirects_are_dev_null = all(x.target_text == "/dev/null" or x.target_text.isdigit() for x in r.redirects)
    if not parsed.simple_commands:
        parsed.simple_commands = [command]
    return parsed
