"""`BlockYaml` (components/yaml_text.py) writes what `yaml.dump` writes with libyaml, byte for byte: for documents
of every shape and scalars of every kind libyaml writes differently (quoted, folded, literal blocks, escaped), at
every depth and column, for the manifests' width and style and the program's."""

from __future__ import annotations

import random
from typing import Any

import pytest
import yaml

from components.yaml_text import BlockYaml, JsonDumper, _as_is


class _Literal(JsonDumper):
    multiline_style = "|"


STYLES = {
    "manifests": (_Literal, 120),
    "program": (JsonDumper, 1000),
    "narrow": (_Literal, 40),
    "narrow-quoted": (JsonDumper, 30),
}

# Characters each of which some rule of libyaml's emitter turns on: indicators, blanks, breaks, quotes, escapes.
ALPHABET = "aZ09_./-:#?,[]{}&*!|>'\"%@`=~+<\\ \n\t\u00e9\u2603\x07"
WORDS = ["yes", "No", "null", "~", "true", "OFF", "123", "0x1F", "1e3", "1:30", "2026-12-07", ".inf", "<<", "=", "---", "..."]


def _text(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.15:
        return rng.choice(WORDS)
    if roll < 0.35:
        # Words and spaces, long enough to fold.
        return " ".join(
            rng.choice(["alpha", "b", "cc:d", "e#f", "g:", "(h)", "i  j", "k'l"]) for _ in range(rng.randrange(1, 60))
        )
    if roll < 0.45:
        return "\n".join(_text(rng) for _ in range(rng.randrange(1, 4))) + rng.choice(["", "\n", "\n\n", " "])
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 12)))


def _scalar(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.7:
        return _text(rng)
    return rng.choice([0, -7, 2**70, 0.5, 1e-9, 1e300, float("inf"), float("nan"), True, False, None, 3.0])


def _key(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.02:
        return "k" * 130  # not a simple key: the document is libyaml's
    if roll < 0.2:
        return "".join(rng.choice(ALPHABET.replace("\n", "")) for _ in range(rng.randrange(0, 10)))
    return rng.choice(["name", "spec", "a", "yes", "metadata.annotations/x", "0", "a b"])


def _document(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 5 or roll < 0.4:
        return _scalar(rng)
    if roll < 0.75:
        return {_key(rng): _document(rng, depth + 1) for _ in range(rng.randrange(0, 5))}
    return [_document(rng, depth + 1) for _ in range(rng.randrange(0, 4))]


def _libyaml(document: Any, dumper: type, width: int) -> str:
    return yaml.dump(document, Dumper=dumper, sort_keys=False, default_flow_style=False, width=width)


@pytest.mark.parametrize("style", STYLES, ids=list(STYLES))
def test_random_documents_are_written_as_libyaml_writes_them(style: str):
    dumper, width = STYLES[style]
    writer = BlockYaml(dumper, width)
    rng = random.Random(f"block-yaml-{style}")
    for _ in range(1500):
        document = {"root": _document(rng), **({"more": _document(rng)} if rng.random() < 0.5 else {})}
        if rng.random() < 0.1:
            document = _document(rng)  # a document that is not a mapping
        expected = _libyaml(document, dumper, width)
        # Twice: the second time from what the writer kept.
        assert writer.dump(document) == expected, document
        assert writer.dump(document) == expected, document


@pytest.mark.parametrize("style", STYLES, ids=list(STYLES))
def test_one_text_at_every_depth_and_column(style: str):
    """A text written as it is, kept, then met again deeper, further right or in a sequence: folded, quoted and
    literal texts included."""
    dumper, width = STYLES[style]
    writer = BlockYaml(dumper, width)
    texts = ["word", "two words " * 12, "a:b " * 30, "it's " * 20, "caf\u00e9 " * 25, "line\nline", "x\n" * 3, "tab\tx " * 20]
    for text in texts:
        for depth in range(0, 9):
            for key in ("k", "a-much-longer-key-name-than-usual", "yes"):
                document: Any = {key: text}
                for level in range(depth):
                    document = {"level": document} if level % 2 else {"items": [document, text]}
                assert writer.dump(document) == _libyaml(document, dumper, width), (text, depth, key)


def test_as_is_is_what_libyaml_writes_plain():
    """`_as_is` against libyaml over every short text of the alphabet's awkward characters and the resolver's words."""
    rng = random.Random("as-is")
    texts = [*WORDS, *("".join(rng.choice(ALPHABET) for _ in range(rng.randrange(1, 8))) for _ in range(20000))]
    texts += ["a" + "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 8))) for _ in range(20000)]
    for text in texts:
        if _as_is(text):
            assert _libyaml({"k": text}, JsonDumper, 1 << 30) == f"k: {text}\n", text
