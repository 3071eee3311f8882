"""internal/gousage.py: Go's flag.PrintDefaults layout, byte for byte, from flag records."""

from __future__ import annotations

from nsqpy.internal.gousage import UsageFlag, format_usage, go_float, go_quote


def test_layout_sorted_with_defaults_and_short_flags() -> None:
    text = format_usage(
        "nsq_x",
        [
            UsageFlag("topic", "value", None, "NSQ topic (may be given multiple times)"),
            UsageFlag("n", "int", "5", "how many"),
            UsageFlag("v", "", None, "verbose"),
            UsageFlag("channel", "string", "c", "NSQ channel", quote=True),
            UsageFlag("wait", "duration", "1m0s", "line one\nline two"),
            UsageFlag("size", "int", None, "rotate above `bytes` bytes"),
        ],
    )
    assert text == (
        "Usage of nsq_x:\n"
        '  -channel string\n    \tNSQ channel (default "c")\n'
        "  -n int\n    \thow many (default 5)\n"
        "  -size bytes\n    \trotate above bytes bytes\n"
        "  -topic value\n    \tNSQ topic (may be given multiple times)\n"
        "  -v\tverbose\n"
        "  -wait duration\n    \tline one\n    \tline two (default 1m0s)\n"
    )


def test_go_quote_and_float() -> None:
    assert go_quote('a"b\\c\n\t\x01') == '"a\\"b\\\\c\\n\\t\\x01"'
    assert go_quote("[nsqd] ") == '"[nsqd] "'
    assert go_float(1.0) == "1" and go_float(0.5) == "0.5"
