"""``errors.one_line``: another library's complaint as one line that keeps its start and end."""

from npusim.errors import one_line


def test_a_complaint_over_lines_is_one_line_whole_when_short():
    assert one_line("input 'w' of node:\n name: c OpType: Conv\n is not output") == \
        "input 'w' of node: name: c OpType: Conv is not output"


def test_a_long_complaint_keeps_its_start_and_its_end():
    text = "Load model failed: " + "trace " * 200 + "Dilation not supported"
    said = one_line(text, most=100)
    assert said.startswith("Load model failed: trace") and said.endswith("Dilation not supported")
    assert " ... " in said and len(said) == 40 + len(" ... ") + 60
