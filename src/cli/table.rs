//! Tables that fit a width: identifier columns (routes, classes, actions, states) keep
//! their full width and are never broken; free-text columns share what is left and wrap
//! at word or item boundaries, cut with an ellipsis past their line budget. When even the
//! identifiers do not fit, each row becomes a block of `field: value` lines, as kubectl
//! and cargo do. comfy-table draws; the layout is decided here, so no line is ever wider
//! than the width asked for (unless one identifier alone is).

use super::look::{Look, Tone};
use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};

/// Below this, a free-text column is unreadable: fall back to blocks.
const MIN_TEXT: usize = 12;
/// Free text cut to one line is worth reading from this width on (a few words of a
/// provider's message); below it, a less needed column makes room first.
const MIN_LINE_TEXT: usize = 16;
/// A word longer than this in a free-text column is not a name; it may be cut.
const MAX_WORD: usize = 30;

/// How a column may be laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Never broken: the column is as wide as its widest value.
    Ident,
    /// Wraps; past `max_lines` lines it is cut with an ellipsis.
    Text { max_lines: usize },
}

#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub header: &'static str,
    pub kind: Kind,
}

impl Column {
    pub const fn ident(header: &'static str) -> Column {
        Column {
            header,
            kind: Kind::Ident,
        }
    }
    pub const fn text(header: &'static str, max_lines: usize) -> Column {
        Column {
            header,
            kind: Kind::Text { max_lines },
        }
    }
}

/// One value: hard lines, each a list of items joined by `sep`. Wrapping breaks between
/// items first, then between words of an item too long for a line.
#[derive(Debug, Clone, Default)]
pub struct Cell {
    lines: Vec<Vec<String>>,
    sep: &'static str,
    tone: Option<Tone>,
}

impl Cell {
    /// One value, wrapped between words when its column is free text.
    pub fn new(text: impl Into<String>) -> Cell {
        let text = text.into();
        Cell {
            lines: text
                .lines()
                .map(|l| l.split_whitespace().map(str::to_string).collect())
                .collect(),
            sep: " ",
            tone: None,
        }
    }

    /// Lists (one per hard line) of items joined by `sep`, e.g. attempts by ", ".
    pub fn items(lines: Vec<Vec<String>>, sep: &'static str) -> Cell {
        Cell {
            lines,
            sep,
            tone: None,
        }
    }

    pub fn tone(mut self, tone: Option<Tone>) -> Cell {
        self.tone = tone;
        self
    }

    fn is_empty(&self) -> bool {
        self.lines.iter().all(Vec::is_empty)
    }

    /// The longest single word: narrower than this, a word (often a name: `quota`,
    /// `model_unavailable`) would be cut.
    fn longest_word(&self) -> usize {
        self.lines
            .iter()
            .flatten()
            .flat_map(|item| item.split(' '))
            .map(width)
            .max()
            .unwrap_or(0)
    }

    /// The widest hard line, unwrapped.
    fn natural(&self) -> usize {
        self.lines
            .iter()
            .map(|items| width(&items.join(self.sep)))
            .max()
            .unwrap_or(0)
    }

    fn layout(&self, kind: Kind, w: usize) -> Vec<String> {
        match kind {
            Kind::Ident => self.lines.iter().map(|l| l.join(self.sep)).collect(),
            Kind::Text { max_lines } => clip(wrap(&self.lines, self.sep, w), w, max_lines.max(1)),
        }
    }
}

/// Display width, counted in characters: every name and symbol poolctl prints
/// (`—`, `→`, box drawing) is one column wide.
pub fn width(s: &str) -> usize {
    s.chars().count()
}

/// Renders `rows` under `columns` in `look.width` columns.
pub fn render(columns: &[Column], rows: &[Vec<Cell>], look: &Look) -> String {
    // A column empty in every row (no retry hints, no headroom) only costs width.
    let keep: Vec<usize> = (0..columns.len())
        .filter(|&i| {
            rows.is_empty() || rows.iter().any(|r| r.get(i).is_some_and(|c| !c.is_empty()))
        })
        .collect();
    let columns: Vec<Column> = keep.iter().map(|&i| columns[i]).collect();
    let rows: Vec<Vec<Cell>> = rows
        .iter()
        .map(|r| {
            keep.iter()
                .map(|&i| r.get(i).cloned().unwrap_or_default())
                .collect()
        })
        .collect();
    match plan(&columns, &rows, look.width) {
        Some(widths) => draw(&columns, &rows, &widths, look),
        None => blocks(&columns, &rows, look),
    }
}

/// Column content widths that fit `total`, or None when the identifiers alone do not.
fn plan(columns: &[Column], rows: &[Vec<Cell>], total: usize) -> Option<Vec<usize>> {
    let natural: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(Cell::natural)
                .chain([width(c.header)])
                .max()
                .unwrap_or(0)
        })
        .collect();
    // UTF8_FULL_CONDENSED: one border per side and between columns, one space of
    // padding on each side of every value.
    let overhead = 3 * columns.len() + 1;
    let idents: usize = columns
        .iter()
        .zip(&natural)
        .filter(|(c, _)| c.kind == Kind::Ident)
        .map(|(_, w)| w)
        .sum();
    let mut avail = total.checked_sub(overhead + idents)?;
    let mut widths = natural.clone();
    let mut text: Vec<usize> = (0..columns.len())
        .filter(|&i| columns[i].kind != Kind::Ident)
        .collect();
    // A text column is never narrower than its header, MIN_TEXT, or its longest word (up
    // to MAX_WORD: past that it is prose, and may be cut).
    let words: Vec<usize> = (0..columns.len())
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(Cell::longest_word)
                .max()
                .unwrap_or(0)
                .min(MAX_WORD)
        })
        .collect();
    let floor = |i: usize| natural[i].min(MIN_TEXT.max(width(columns[i].header)).max(words[i]));
    if text.iter().map(|&i| floor(i)).sum::<usize>() > avail {
        return None;
    }
    // Water-filling: narrow columns keep their natural width, the rest share equally.
    text.sort_by_key(|&i| natural[i]);
    let mut left = text.len();
    for i in text {
        let share = avail / left;
        widths[i] = natural[i].min(share.max(floor(i)));
        avail -= widths[i];
        left -= 1;
    }
    Some(widths)
}

/// What [`lines`] printed, and the columns it left out to fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lines {
    pub text: String,
    pub dropped: Vec<&'static str>,
}

/// One line per row, without borders: a header line, then each row with identifiers
/// padded to their column and free text cut to one line with an ellipsis. A long list
/// (a probe of every route of a tier) stays as long as it has rows, where a bordered
/// table too wide for the width would become a block of lines per row. While the
/// columns do not fit, the ones named in `droppable` are left out, first named first;
/// None when even the rest do not fit.
pub fn lines(
    columns: &[Column],
    rows: &[Vec<Cell>],
    droppable: &[&str],
    look: &Look,
) -> Option<Lines> {
    // Two spaces between columns, the gap `ls -l` and kubectl leave.
    const GAP: usize = 2;
    let mut keep: Vec<usize> = (0..columns.len())
        .filter(|&i| {
            rows.is_empty() || rows.iter().any(|r| r.get(i).is_some_and(|c| !c.is_empty()))
        })
        .collect();
    let natural = |i: usize| {
        rows.iter()
            .filter_map(|r| r.get(i))
            .map(Cell::natural)
            .chain([width(columns[i].header)])
            .max()
            .unwrap_or(0)
    };
    let floor = |i: usize| match columns[i].kind {
        Kind::Ident => natural(i),
        Kind::Text { .. } => natural(i).min(MIN_LINE_TEXT.max(width(columns[i].header))),
    };
    let mut dropped = Vec::new();
    let mut next_drop = droppable.iter();
    loop {
        let need: usize =
            keep.iter().map(|&i| floor(i)).sum::<usize>() + GAP * keep.len().saturating_sub(1);
        if need <= look.width {
            break;
        }
        let &name = next_drop.find(|name| keep.iter().any(|&i| columns[i].header == **name))?;
        keep.retain(|&i| columns[i].header != name);
        dropped.push(columns.iter().find(|c| c.header == name)?.header);
    }
    // Identifiers at their natural width; free text shares what is left, narrowest first.
    let mut widths: Vec<usize> = keep.iter().map(|&i| natural(i)).collect();
    let idents: usize = keep
        .iter()
        .zip(&widths)
        .filter(|(&i, _)| columns[i].kind == Kind::Ident)
        .map(|(_, w)| w)
        .sum();
    let mut avail = look
        .width
        .saturating_sub(idents + GAP * keep.len().saturating_sub(1));
    let mut text: Vec<usize> = (0..keep.len())
        .filter(|&k| columns[keep[k]].kind != Kind::Ident)
        .collect();
    text.sort_by_key(|&k| widths[k]);
    let mut left = text.len();
    for k in text {
        let share = avail / left;
        widths[k] = widths[k].min(share.max(floor(keep[k])));
        avail = avail.saturating_sub(widths[k]);
        left -= 1;
    }
    let line = |cells: Vec<(String, Option<Tone>)>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (k, (value, tone)) in cells.into_iter().enumerate() {
            let pad = if k == last {
                0
            } else {
                widths[k].saturating_sub(width(&value)) + GAP
            };
            match tone {
                Some(tone) => out.push_str(&look.paint(tone, &value)),
                None => out.push_str(&value),
            }
            out.push_str(&" ".repeat(pad));
        }
        format!("{}\n", out.trim_end())
    };
    let mut out = line(
        keep.iter()
            .map(|&i| (columns[i].header.to_string(), None))
            .collect(),
    );
    for row in rows {
        let cells = keep
            .iter()
            .enumerate()
            .map(|(k, &i)| {
                let cell = row.get(i).cloned().unwrap_or_default();
                let whole = cell
                    .lines
                    .iter()
                    .map(|items| items.join(cell.sep))
                    .collect::<Vec<_>>()
                    .join(" ");
                // Whole when it fits (wrapping would keep room for a trailing `,`
                // that a line with nothing after it never needs), else cut at a word.
                let one_line = if columns[i].kind == Kind::Ident || width(&whole) <= widths[k] {
                    whole
                } else {
                    cell.layout(Kind::Text { max_lines: 1 }, widths[k])
                        .join(" ")
                };
                (one_line, cell.tone)
            })
            .collect();
        out.push_str(&line(cells));
    }
    Some(Lines { text: out, dropped })
}

fn draw(columns: &[Column], rows: &[Vec<Cell>], widths: &[usize], look: &Look) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        // Every value is already laid out within its width; comfy-table only draws.
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(columns.iter().map(|c| c.header));
    if look.color {
        t.enforce_styling();
    } else {
        t.force_no_tty();
    }
    for row in rows {
        let cells = columns.iter().enumerate().map(|(i, c)| {
            let cell = row.get(i).cloned().unwrap_or_default();
            let text = cell.layout(c.kind, widths[i]).join("\n");
            let mut out = comfy_table::Cell::new(text);
            if let (true, Some(tone)) = (look.color, cell.tone) {
                out = out.fg(comfy_color(tone));
                if matches!(tone, Tone::Fail | Tone::Warn) {
                    out = out.add_attribute(comfy_table::Attribute::Bold);
                }
            }
            out
        });
        t.add_row(cells);
    }
    format!("{t}\n")
}

fn comfy_color(tone: Tone) -> comfy_table::Color {
    match tone {
        Tone::Fail => comfy_table::Color::Red,
        Tone::Warn | Tone::Mild => comfy_table::Color::Yellow,
        Tone::Good => comfy_table::Color::Green,
    }
}

/// One block per row: the first column as a heading, every other non-empty value
/// indented below it, free text wrapped to the width.
fn blocks(columns: &[Column], rows: &[Vec<Cell>], look: &Look) -> String {
    let mut out = String::new();
    for row in rows {
        for (i, c) in columns.iter().enumerate() {
            let Some(cell) = row.get(i).filter(|c| !c.is_empty()) else {
                continue;
            };
            let indent = if i == 0 { "" } else { "  " };
            let key = format!("{indent}{}: ", c.header);
            let room = look.width.saturating_sub(width(&key)).max(MIN_TEXT);
            let lines = cell.layout(c.kind, room);
            for (n, line) in lines.iter().enumerate() {
                let lead = if n == 0 {
                    key.clone()
                } else {
                    " ".repeat(width(&key))
                };
                let value = match cell.tone {
                    Some(tone) => look.paint(tone, line),
                    None => line.clone(),
                };
                out.push_str(&format!("{lead}{value}\n"));
            }
        }
    }
    out
}

/// Greedy wrap: items joined by `sep` while they fit; an item wider than a line is
/// wrapped between its words; a word wider than a line is cut with an ellipsis.
pub fn wrap(lines: &[Vec<String>], sep: &str, w: usize) -> Vec<String> {
    let w = w.max(1);
    // A line that breaks after an item keeps the separator's visible part (","), so
    // leave room for it.
    let tail = sep.trim_end();
    let room = w.saturating_sub(width(tail)).max(1);
    let mut out = Vec::new();
    for items in lines {
        let mut cur = String::new();
        for item in items {
            let joined = width(&cur) + width(sep) + width(item);
            if !cur.is_empty() && joined <= room {
                cur.push_str(sep);
                cur.push_str(item);
                continue;
            }
            if !cur.is_empty() {
                out.push(format!("{cur}{tail}"));
                cur.clear();
            }
            if width(item) <= room {
                cur = item.clone();
            } else {
                let words: Vec<String> = item.split(' ').map(str::to_string).collect();
                let mut parts = wrap_words(&words, room);
                cur = parts.pop().unwrap_or_default();
                out.extend(parts);
            }
        }
        if !cur.is_empty() {
            out.push(cur);
        }
    }
    out
}

fn wrap_words(words: &[String], w: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for word in words.iter().filter(|w| !w.is_empty()) {
        if !cur.is_empty() && width(&cur) + 1 + width(word) <= w {
            cur.push(' ');
            cur.push_str(word);
            continue;
        }
        if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur = if width(word) <= w {
            word.clone()
        } else {
            ellipsis(word, w)
        };
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `s` cut to `w` characters, the last one an ellipsis.
pub fn ellipsis(s: &str, w: usize) -> String {
    if width(s) <= w {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(w.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// At most `max` lines; when some were dropped, the last kept one ends in an ellipsis.
fn clip(mut lines: Vec<String>, w: usize, max: usize) -> Vec<String> {
    if lines.len() > max {
        lines.truncate(max);
        if let Some(last) = lines.last_mut() {
            *last = if width(last) < w {
                format!("{last}…")
            } else {
                // No room for the ellipsis: give up the last word rather than cut it
                // ("…model has" must not read "…model ha…").
                match last.rfind(' ') {
                    Some(at) if at > 0 => format!("{}…", last[..at].trim_end()),
                    _ => ellipsis(&format!("{last}…"), w),
                }
            };
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn longest(s: &str) -> usize {
        s.lines().map(width).max().unwrap_or(0)
    }

    fn rows() -> Vec<Vec<Cell>> {
        vec![
            vec![
                Cell::new("dashscope/free-tier403-qwen3-max"),
                Cell::new("quota_exhausted"),
                Cell::new("The free tier of the model has been exhausted. If you wish to continue access the model on a paid basis, please disable the free tier only mode in the management console."),
            ],
            vec![
                Cell::new("openai/gpt-4.1"),
                Cell::new("ok"),
                Cell::new(""),
            ],
        ]
    }

    const COLS: [Column; 3] = [
        Column::ident("route"),
        Column::ident("class"),
        Column::text("detail", 2),
    ];

    #[test]
    fn identifiers_stay_whole_and_no_line_passes_the_width() {
        for w in [60, 80, 200] {
            let out = render(&COLS, &rows(), &Look::plain(w));
            assert!(longest(&out) <= w, "{w}:\n{out}");
            assert!(out.contains("dashscope/free-tier403-qwen3-max"), "{out}");
            assert!(out.contains("quota_exhausted"), "{out}");
        }
    }

    #[test]
    fn free_text_past_its_line_budget_ends_in_an_ellipsis() {
        let out = render(&COLS, &rows(), &Look::plain(80));
        assert!(out.contains('…'), "{out}");
        assert!(!out.contains("management console"), "{out}");
    }

    #[test]
    fn too_narrow_for_the_identifiers_becomes_one_block_per_row() {
        let out = render(&COLS, &rows(), &Look::plain(40));
        assert!(
            out.starts_with("route: dashscope/free-tier403-qwen3-max\n  class: quota_exhausted\n"),
            "{out}"
        );
        assert!(longest(&out) <= 40, "{out}");
        assert!(!out.contains('┆'), "{out}");
    }

    #[test]
    fn a_name_in_a_free_text_column_is_never_cut_to_fit() {
        let cols = [Column::ident("route"), Column::text("reason", 2)];
        let rows = vec![vec![
            Cell::new("dashscope/qwen3-max-preview-2026"),
            Cell::new("model_unavailable"),
        ]];
        for w in [40, 60, 64, 80] {
            let out = render(&cols, &rows, &Look::plain(w));
            assert!(out.contains("model_unavailable"), "{w}:\n{out}");
            assert!(longest(&out) <= w, "{w}:\n{out}");
        }
    }

    #[test]
    fn items_wrap_between_items_and_keep_the_separator() {
        let items = vec![vec!["429 rate_limited→retry".to_string(); 4]];
        let lines = wrap(&items, ", ", 50);
        assert_eq!(
            lines,
            vec![
                "429 rate_limited→retry, 429 rate_limited→retry,",
                "429 rate_limited→retry, 429 rate_limited→retry"
            ]
        );
    }

    #[test]
    fn clipped_text_that_fills_its_line_loses_a_word_not_half_of_one() {
        let lines = clip(
            vec!["The free tier of the model has".into(), "been".into()],
            30,
            1,
        );
        assert_eq!(lines, vec!["The free tier of the model…"]);
    }

    #[test]
    fn lines_print_one_line_a_row_and_leave_out_what_is_needed_least() {
        let cols = [
            Column::ident("route"),
            Column::ident("class"),
            Column::ident("request id"),
            Column::text("detail", 3),
        ];
        let rows: Vec<Vec<Cell>> = (0..11)
            .map(|i| {
                vec![
                    Cell::new(format!("dashscope/qwen3.7-max-2026-05-{i:02}")),
                    Cell::new("quota_exhausted"),
                    Cell::new("7f3a9c2e-0000-4000-8000-1234567890ab"),
                    Cell::new("The free tier of the model has been exhausted. If you wish to continue access the model on a paid basis, please disable the free tier only mode."),
                ]
            })
            .collect();
        let wide = lines(&cols, &rows, &["request id"], &Look::plain(200)).unwrap();
        assert!(wide.dropped.is_empty());
        assert_eq!(wide.text.lines().count(), 12, "{}", wide.text);
        let narrow = lines(&cols, &rows, &["request id"], &Look::plain(80)).unwrap();
        assert_eq!(narrow.dropped, vec!["request id"]);
        assert_eq!(narrow.text.lines().count(), 12, "{}", narrow.text);
        assert!(longest(&narrow.text) <= 80, "{}", narrow.text);
        assert!(
            narrow.text.contains("quota_exhausted  The free tier"),
            "{}",
            narrow.text
        );
        // Too narrow for the route and the class: the caller falls back to blocks.
        assert_eq!(
            lines(&cols, &rows, &["request id", "detail"], &Look::plain(30)),
            None
        );
    }

    #[test]
    fn a_word_wider_than_the_line_is_cut_with_an_ellipsis() {
        assert_eq!(ellipsis("abcdefgh", 5), "abcd…");
        assert_eq!(wrap(&[vec!["abcdefgh".into()]], " ", 5), vec!["abcd…"]);
    }
}
