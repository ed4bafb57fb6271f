"""Long answers split where a reader pauses (#20): paragraphs, then lines, then words; code
blocks whole in each message; at most so many messages."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bot.slack.answer_parts import FENCE, split_answer
from bot.slack.delivery.streams import streamable
from bot.slack.markdown import safe_markdown


def test_a_short_answer_is_one_part() -> None:
    assert split_answer("hello\n\nworld", 100, 5) == ["hello\n\nworld"]


def test_paragraphs_stay_whole_and_in_order() -> None:
    paragraphs = [f"paragraph {i} " + "word " * 30 for i in range(12)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    parts = split_answer(text, 500, 10)
    assert len(parts) > 1 and all(len(p) <= 500 for p in parts)
    for part in parts:  # every part begins and ends on a paragraph's edge
        assert part.startswith("paragraph ") and part.endswith("word")
    assert "\n\n".join(parts) == text


def test_a_code_block_is_closed_and_opened_again() -> None:
    code = "\n".join(f"line {i} = compute({i})" for i in range(80))
    text = f"Here is the script:\n\n{FENCE}\n{code}\n{FENCE}\n\nThat is all."
    parts = split_answer(text, 600, 10)
    assert len(parts) > 2
    for part in parts:
        assert part.count(FENCE) % 2 == 0, part  # each renders on its own
        assert len(part) <= 600
    assert parts[1].startswith(FENCE + "\n") and parts[0].endswith("\n" + FENCE)


def test_too_long_says_how_much_was_left_out() -> None:
    text = "\n\n".join("x" * 90 for _ in range(100))
    parts = split_answer(text, 200, 3)
    assert len(parts) == 3 and all(len(p) <= 200 for p in parts)
    assert parts[-1].endswith("more characters not shown)_")


def test_an_entity_is_never_cut() -> None:
    text = "&amp;" * 300  # no space or line to cut at
    for part in split_answer(text, 103, 50):
        assert part.replace("&amp;", "") == "", part


@given(st.text(alphabet=st.sampled_from("ab &;\n`"), min_size=0, max_size=3000))
def test_any_text_fits_and_loses_nothing_but_its_breaks(text: str) -> None:
    parts = split_answer(text, 120, 1000)
    assert all(len(p) <= 120 for p in parts)
    kept = "".join(parts).replace(FENCE, "").replace("\n", "").replace(" ", "")
    assert kept == text.replace(FENCE, "").replace("\n", "").replace(" ", "") or len(parts) == 1


@given(st.text(alphabet=st.sampled_from("ab <@!#here\n"), min_size=0, max_size=200), st.data())
def test_what_a_stream_sends_is_always_the_start_of_the_whole_answer(
    text: str, data: st.DataObject
) -> None:
    """However the model's text is cut while it writes, what went out (whole words, made
    safe) is the start of the whole answer made safe: a stream is only ever appended to."""
    cut = data.draw(st.integers(min_value=0, max_value=len(text)))
    assert safe_markdown(text).startswith(streamable(text[:cut]))
