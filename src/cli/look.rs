//! How output looks where it lands: the width to lay tables out in and whether to use
//! colour. Decided once per command from the terminal, `$COLUMNS`, `NO_COLOR` and
//! `--color`, then handed to the pure render functions so snapshots can fix both.

use std::ffi::OsStr;
use std::io::IsTerminal;

/// The width used when stdout is not a terminal (a file, a pipe, a CI log) or the
/// terminal reports a width of 0 (`script`, some CI runners), and `$COLUMNS` is unset.
pub const DEFAULT_WIDTH: usize = 100;

/// `--color`: colour on a terminal (`auto`), always, or never.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    #[default]
    Auto,
    Always,
    Never,
}

/// What stands out, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// FAIL, a dead tier: bold red.
    Fail,
    /// Retired routes, dead tails, warnings: bold yellow.
    Warn,
    /// pass, ok: green.
    Good,
    /// Cooling, skipped: yellow, not bold.
    Mild,
}

impl Tone {
    fn ansi(self) -> &'static str {
        match self {
            Tone::Fail => "\x1b[1;31m",
            Tone::Warn => "\x1b[1;33m",
            Tone::Good => "\x1b[32m",
            Tone::Mild => "\x1b[33m",
        }
    }
}

/// The width and colour of one command's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    pub width: usize,
    pub color: bool,
}

impl Look {
    /// No colour, a fixed width: for tests and files.
    pub fn plain(width: usize) -> Look {
        Look {
            width,
            color: false,
        }
    }

    /// The look of stdout for this process.
    pub fn detect(choice: ColorChoice) -> Look {
        let stdout = std::io::stdout();
        let tty = stdout.is_terminal();
        let terminal = tty
            .then(|| crossterm::terminal::size().ok().map(|(w, _)| w))
            .flatten();
        let columns = std::env::var("COLUMNS").ok();
        Look {
            width: width_from(terminal, columns.as_deref()),
            color: color_from(
                choice,
                tty,
                std::env::var_os("NO_COLOR").as_deref(),
                std::env::var("TERM").ok().as_deref(),
            ),
        }
    }

    /// `text` in `tone` when colour is on; unchanged otherwise.
    pub fn paint(&self, tone: Tone, text: &str) -> String {
        if self.color && !text.is_empty() {
            format!("{}{text}\x1b[0m", tone.ansi())
        } else {
            text.to_string()
        }
    }
}

/// The terminal's width when it reports one; else `$COLUMNS` when it is a positive
/// number; else `DEFAULT_WIDTH`. A width of 0 is no width: laying out in it would put
/// one character per line.
pub fn width_from(terminal: Option<u16>, columns: Option<&str>) -> usize {
    terminal
        .filter(|w| *w > 0)
        .map(usize::from)
        .or_else(|| {
            columns
                .and_then(|c| c.trim().parse::<usize>().ok())
                .filter(|w| *w > 0)
        })
        .unwrap_or(DEFAULT_WIDTH)
}

/// Colour when forced, or on a terminal that is not `dumb` and without `NO_COLOR`
/// (https://no-color.org: any non-empty value disables it).
pub fn color_from(
    choice: ColorChoice,
    tty: bool,
    no_color: Option<&OsStr>,
    term: Option<&str>,
) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => tty && no_color.is_none_or(OsStr::is_empty) && term != Some("dumb"),
    }
}

/// `text` without ANSI escape sequences, for measuring and for tests.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ params... final byte in @..~
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_or_missing_terminal_width_falls_back_to_columns_then_the_default() {
        assert_eq!(width_from(Some(80), Some("200")), 80);
        assert_eq!(width_from(Some(0), Some("132")), 132);
        assert_eq!(width_from(None, Some("132")), 132);
        assert_eq!(width_from(Some(0), None), DEFAULT_WIDTH);
        assert_eq!(width_from(None, Some("0")), DEFAULT_WIDTH);
        assert_eq!(width_from(None, Some("wide")), DEFAULT_WIDTH);
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color_unless_forced() {
        let on = OsStr::new("1");
        assert!(color_from(ColorChoice::Auto, true, None, Some("xterm")));
        assert!(!color_from(ColorChoice::Auto, false, None, Some("xterm")));
        assert!(!color_from(ColorChoice::Auto, true, Some(on), None));
        assert!(color_from(
            ColorChoice::Auto,
            true,
            Some(OsStr::new("")),
            None
        ));
        assert!(!color_from(ColorChoice::Auto, true, None, Some("dumb")));
        assert!(color_from(ColorChoice::Always, false, Some(on), None));
        assert!(!color_from(ColorChoice::Never, true, None, None));
    }

    #[test]
    fn paint_is_a_no_op_without_colour_and_strips_back_to_the_text() {
        assert_eq!(Look::plain(80).paint(Tone::Fail, "FAIL"), "FAIL");
        let c = Look {
            width: 80,
            color: true,
        };
        let painted = c.paint(Tone::Fail, "FAIL");
        assert_ne!(painted, "FAIL");
        assert_eq!(strip_ansi(&painted), "FAIL");
    }
}
