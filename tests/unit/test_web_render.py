"""The web UI's template helpers: times always labelled, and every value escaped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from runlane.web.render import in_zone, status_badge, templates, when

AT = datetime(2026, 12, 2, 7, 0, 5, tzinfo=UTC)


def test_when_is_a_time_element_labelled_utc() -> None:
    assert str(when(AT, "Europe/Paris")) == (
        '<time datetime="2026-12-02T07:00:05Z" data-zone="Europe/Paris">2026-12-02 07:00 UTC</time>'
    )
    other = AT.astimezone(timezone(timedelta(hours=5)))
    assert str(when(other)) == '<time datetime="2026-12-02T07:00:05Z">2026-12-02 07:00 UTC</time>'
    assert str(when(None)) == '<span class="none">—</span>'


def test_in_zone_shows_the_wall_time_and_names_the_zone() -> None:
    assert str(in_zone(AT, "Asia/Tokyo")) == (
        '<time datetime="2026-12-02T07:00:05Z" data-fixed="1">2026-12-02 16:00 Asia/Tokyo</time>'
    )


def test_values_are_escaped() -> None:
    assert "<b>" not in str(when(AT, '"><b>'))
    assert str(status_badge("<img>")) == '<span class="badge status-other">&lt;img&gt;</span>'
    template = templates.from_string("{{ csrf_field() }} {{ value }}")
    html = template.render(csrf_token='"x', value="<script>")
    assert html == '<input type="hidden" name="csrf_token" value="&#34;x"> &lt;script&gt;'
