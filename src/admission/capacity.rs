//! `poolctl capacity`, the numbers someone watches (seed 004): for each limited bucket,
//! its utilisation as a percentage of the contract per minute over a window (p95, now,
//! trend), its sheds per priority class, the provider's own limit where `probe` saw it;
//! for each tier, the failover ceiling: if the primary went to zero, could the approved
//! backups' free capacity absorb its observed p95 per-minute load? Pure: the numbers in,
//! the report out; the CLI reads the store and prints.

use crate::admission::bucket::Dimension;
use crate::core::vocab::Priority;
use serde::Serialize;
use std::collections::BTreeMap;

/// Utilisation at or above this share of the contract, at the p95, is a warning.
pub const SUSTAINED_PCT: f64 = 70.0;

/// One bucket's recorded use over the window.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketUse {
    pub bucket: String,
    pub dimension: Dimension,
    pub contract: u64,
    pub capacity: f64,
    /// What was spent in each minute of the window, oldest first (0 for a quiet minute);
    /// the last one is the minute in progress.
    pub per_minute: Vec<f64>,
    pub shed: BTreeMap<Priority, u64>,
    /// The provider's own limit on this dimension, as `probe` recorded it.
    pub provider_limit: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BucketReport {
    pub bucket: String,
    pub dimension: Dimension,
    pub contract: u64,
    pub capacity: f64,
    pub utilisation_pct_p95: f64,
    pub utilisation_pct_now: f64,
    pub slope_pct_per_hour: f64,
    pub shed: Sheds,
    pub provider_limit: Option<u64>,
    pub warnings: Vec<String>,
    /// Per-minute utilisation, for the sparkline (not in `--json`).
    #[serde(skip)]
    pub series_pct: Vec<f64>,
}

/// Sheds per priority class, every class present, in the classes' order (cli.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Sheds {
    pub interactive: u64,
    pub retry: u64,
    pub background: u64,
    pub speculative: u64,
}

impl Sheds {
    pub fn of(counts: &BTreeMap<Priority, u64>) -> Sheds {
        let n = |p| counts.get(&p).copied().unwrap_or(0);
        Sheds {
            interactive: n(Priority::Interactive),
            retry: n(Priority::Retry),
            background: n(Priority::Background),
            speculative: n(Priority::Speculative),
        }
    }

    /// `(class, count)` in the classes' order.
    pub fn by_class(&self) -> impl Iterator<Item = (Priority, u64)> {
        [
            (Priority::Interactive, self.interactive),
            (Priority::Retry, self.retry),
            (Priority::Background, self.background),
            (Priority::Speculative, self.speculative),
        ]
        .into_iter()
    }
}

/// The p95 of `xs` (nearest rank); 0 for none.
pub fn p95(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = (0.95 * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

/// The least-squares line through `ys` (one point a step, a minute): its slope per
/// step and its value at the last point; `(0, last)` with fewer than two points.
pub fn trend(ys: &[f64]) -> (f64, f64) {
    let n = ys.len() as f64;
    if ys.len() < 2 {
        return (0.0, ys.last().copied().unwrap_or(0.0));
    }
    let mean_x = (n - 1.0) / 2.0;
    let mean_y = ys.iter().sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, y) in ys.iter().enumerate() {
        let dx = i as f64 - mean_x;
        num += dx * (y - mean_y);
        den += dx * dx;
    }
    let slope = num / den;
    (slope, mean_y + slope * (n - 1.0 - mean_x))
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub fn bucket_report(u: &BucketUse) -> BucketReport {
    let contract = u.contract.max(1) as f64;
    let series: Vec<f64> = u.per_minute.iter().map(|x| x / contract * 100.0).collect();
    let p = p95(&series);
    let now = series.last().copied().unwrap_or(0.0);
    // The trend is fitted to the complete minutes: the one in progress has only part of
    // its traffic yet and would bend every line down. Under two of them there is no
    // trend to speak of.
    let complete = &series[..series.len().saturating_sub(1)];
    let (slope, fitted) = if complete.len() >= 2 {
        trend(complete)
    } else {
        (0.0, now)
    };
    let slope_h = slope * 60.0;
    let mut warnings = Vec::new();
    let name = format!("{} {}", u.bucket, u.dimension.as_str());
    if p >= SUSTAINED_PCT {
        warnings.push(format!(
            "{name}: p95 utilisation {:.1} % is at or above {SUSTAINED_PCT} % of the contract",
            p
        ));
    }
    // Where the line stands now, projected a day ahead.
    if slope_h > 0.0 && fitted + slope_h * 24.0 >= 100.0 {
        let hours = ((100.0 - fitted) / slope_h).max(0.0);
        warnings.push(format!(
            "{name}: at {:+.1} %/h it reaches 100 % of the contract in {:.1} h",
            slope_h, hours
        ));
    }
    if let Some(limit) = u.provider_limit.filter(|l| *l < u.contract) {
        warnings.push(format!(
            "{name}: the configured contract {} is larger than the provider's own limit {limit}",
            u.contract
        ));
    }
    BucketReport {
        bucket: u.bucket.clone(),
        dimension: u.dimension,
        contract: u.contract,
        capacity: u.capacity,
        utilisation_pct_p95: round1(p),
        utilisation_pct_now: round1(now),
        slope_pct_per_hour: round1(slope_h),
        shed: Sheds::of(&u.shed),
        provider_limit: u.provider_limit,
        warnings,
        series_pct: series,
    }
}

/// One dimension of a tier's failover ceiling.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CeilingDimension {
    pub dimension: Dimension,
    pub primary_load_p95: f64,
    /// `None`: some backup has no limit on this dimension (nothing bounds it here).
    pub backups_free: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TierCeiling {
    pub tier: String,
    pub primary: String,
    pub ceiling_holds: bool,
    pub dimensions: Vec<CeilingDimension>,
    pub warnings: Vec<String>,
}

/// The buckets that cover a route, per dimension: what each used per minute (p95) and
/// its capacity (contract × headroom: what admission lets through). A route covered by
/// no bucket on a dimension is unbounded there.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteLoad {
    /// Per dimension: the covering buckets, the route's own entry first when it has one.
    pub buckets: BTreeMap<Dimension, Vec<Covering>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Covering {
    /// The `limits:` key: the route itself or its provider.
    pub name: String,
    /// Whether the entry names the route itself (not its whole provider).
    pub own: bool,
    pub capacity: f64,
    pub used_p95: f64,
}

/// The failover ceiling of a tier whose primary is `primary` and whose approved
/// backups are `backups`: per dimension the primary is limited on, its observed p95
/// load (its own entry's, else its provider's: the closest measure of its traffic)
/// against the backups' free capacity (capacity − p95 use, each bucket counted once,
/// the tightest bucket of a route deciding; a bucket the primary shares, such as its
/// provider's entry, gives back the primary's load). No backup is no capacity: the
/// ceiling fails wherever the primary carries load.
pub fn ceiling(
    tier: &str,
    primary: (&str, &RouteLoad),
    backups: &[(&str, &RouteLoad)],
) -> TierCeiling {
    let mut dims = Vec::new();
    let mut warnings = Vec::new();
    for (dim, covering) in &primary.1.buckets {
        let load = covering
            .iter()
            .find(|c| c.own)
            .or_else(|| covering.first())
            .map_or(0.0, |c| c.used_p95);
        let mut free = Some(0.0);
        let mut counted: Vec<&str> = Vec::new();
        for (_, b) in backups {
            match b.buckets.get(dim) {
                None => free = None,
                Some(bs) => {
                    // A route's free capacity is its tightest covering bucket's, and a
                    // bucket shared by two backups is counted once.
                    // A bucket the primary shares (its provider's entry) frees the
                    // primary's own load when the primary goes to zero.
                    let room = |c: &Covering| {
                        let shared = covering.iter().any(|p| p.name == c.name);
                        let used = if shared {
                            (c.used_p95 - load).max(0.0)
                        } else {
                            c.used_p95
                        };
                        (c.capacity - used).max(0.0)
                    };
                    let Some(tightest) = bs.iter().min_by(|x, y| room(x).total_cmp(&room(y)))
                    else {
                        continue;
                    };
                    if !counted.contains(&tightest.name.as_str()) {
                        counted.push(&tightest.name);
                        if let Some(f) = free.as_mut() {
                            *f += room(tightest);
                        }
                    }
                }
            }
        }
        if backups.is_empty() {
            free = Some(0.0);
        }
        if let Some(f) = free.filter(|f| *f < load) {
            warnings.push(format!(
                "backups absorb {:.0} of {:.0} {}: {:.0} %",
                f,
                load,
                dim.as_str(),
                if load > 0.0 { f / load * 100.0 } else { 100.0 }
            ));
        }
        dims.push(CeilingDimension {
            dimension: *dim,
            primary_load_p95: round1(load),
            backups_free: free.map(round1),
        });
    }
    TierCeiling {
        tier: tier.to_string(),
        primary: primary.0.to_string(),
        ceiling_holds: warnings.is_empty(),
        dimensions: dims,
        warnings,
    }
}

/// A sparkline and the range its bars span.
#[derive(Debug, Clone, PartialEq)]
pub struct Sparkline {
    pub line: String,
    /// The percentage the lowest bar stands for, and the highest.
    pub low: f64,
    pub high: f64,
}

/// A sparkline of percentages, at most `width` characters: one a minute, or when the
/// window has more minutes, each the highest of its share of them (a peak must not
/// vanish in an average). The bars span the window's own range, lowest to highest: on
/// a 0-100 % scale a burst from 1 % to 4 % drew eight flat `▁` (issue 21). A window
/// that never moved has no range; its bars stand at their level of 0-100 %.
pub fn sparkline(pcts: &[f64], width: usize) -> Sparkline {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let width = width.max(1);
    let per = pcts.len().div_ceil(width).max(1);
    let peaks: Vec<f64> = pcts
        .chunks(per)
        .map(|c| c.iter().copied().fold(0.0, f64::max))
        .collect();
    let low = peaks.iter().copied().fold(f64::INFINITY, f64::min);
    let high = peaks.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if peaks.is_empty() {
        return Sparkline {
            line: String::new(),
            low: 0.0,
            high: 0.0,
        };
    }
    // Below a hundredth of a percent the "range" is rounding noise, not a burst.
    let flat = high - low < 0.01;
    let bar = |p: f64| {
        let at = if flat {
            p.clamp(0.0, 100.0) / 100.0
        } else {
            (p - low) / (high - low)
        };
        BARS[(at * 7.0).round() as usize]
    };
    Sparkline {
        line: peaks.iter().map(|&p| bar(p)).collect(),
        low,
        high,
    }
}

/// `30m`, `2h`, `1d`, `90s`: a window in ms.
pub fn parse_window(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{s}`: give a unit (s, m, h or d), e.g. 30m"))?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}`: not a duration such as 30m, 2h or 1d"))?;
    let ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (s, m, h or d)")),
    };
    match n.checked_mul(ms) {
        Some(w) if (60_000..=8 * 86_400_000).contains(&w) => Ok(w),
        _ => Err(format!(
            "`{s}`: the window must be between 1m and 8d (usage is kept 8 days)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn use_of(per_minute: Vec<f64>) -> BucketUse {
        BucketUse {
            bucket: "openai/gpt-4o".into(),
            dimension: Dimension::Rpm,
            contract: 100,
            capacity: 90.0,
            per_minute,
            shed: BTreeMap::new(),
            provider_limit: None,
        }
    }

    #[test]
    fn p95_is_the_nearest_rank() {
        let xs: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(p95(&xs), 19.0);
        assert_eq!(p95(&[5.0]), 5.0);
        assert_eq!(p95(&[]), 0.0);
    }

    #[test]
    fn sustained_use_warns_and_a_quiet_bucket_does_not() {
        let hot = bucket_report(&use_of(vec![72.0; 30]));
        assert_eq!(hot.utilisation_pct_p95, 72.0);
        assert_eq!(hot.warnings.len(), 1, "{:?}", hot.warnings);
        let quiet = bucket_report(&use_of(vec![10.0; 30]));
        assert!(quiet.warnings.is_empty(), "{:?}", quiet.warnings);
        assert_eq!(quiet.slope_pct_per_hour, 0.0);
    }

    #[test]
    fn a_slope_that_reaches_100_within_a_day_warns() {
        // +1 % per minute from 0: 60 %/h.
        let r = bucket_report(&use_of((0..30).map(f64::from).collect()));
        assert_eq!(r.slope_pct_per_hour, 60.0);
        assert!(
            r.warnings.iter().any(|w| w.contains("reaches 100 %")),
            "{:?}",
            r.warnings
        );
        // +0.01 % per minute from 1 %: 0.6 %/h, not within a day.
        let r = bucket_report(&use_of(
            (0..30).map(|i| 1.0 + f64::from(i) * 0.01).collect(),
        ));
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        // Two minutes, one of them in progress: no trend from one complete minute.
        let r = bucket_report(&use_of(vec![0.0, 4.0]));
        assert_eq!(r.slope_pct_per_hour, 0.0);
    }

    #[test]
    fn a_contract_above_the_providers_limit_warns() {
        let mut u = use_of(vec![0.0]);
        u.provider_limit = Some(60);
        assert!(bucket_report(&u).warnings[0].contains("larger than the provider's own limit 60"));
    }

    fn load(buckets: &[(Dimension, &str, f64, f64)]) -> RouteLoad {
        let mut l = RouteLoad::default();
        for (d, n, c, u) in buckets {
            l.buckets.entry(*d).or_default().push(Covering {
                name: n.to_string(),
                own: n.contains('/'),
                capacity: *c,
                used_p95: u.to_owned(),
            });
        }
        l
    }

    #[test]
    fn the_ceiling_counts_a_shared_bucket_once_and_says_no_with_the_numbers() {
        let primary = load(&[(Dimension::Rpm, "openai/gpt-4o", 500.0, 420.0)]);
        let b1 = load(&[(Dimension::Rpm, "anthropic", 100.0, 10.0)]);
        let b2 = load(&[(Dimension::Rpm, "anthropic", 100.0, 10.0)]);
        let b3 = load(&[(Dimension::Rpm, "groq/x", 120.0, 30.0)]);
        let c = ceiling(
            "high",
            ("openai/gpt-4o", &primary),
            &[("anthropic/a", &b1), ("anthropic/b", &b2), ("groq/x", &b3)],
        );
        assert!(!c.ceiling_holds);
        assert_eq!(c.dimensions[0].backups_free, Some(180.0));
        assert_eq!(
            c.warnings,
            vec!["backups absorb 180 of 420 rpm: 43 %".to_string()]
        );
        let big = load(&[(Dimension::Rpm, "groq/y", 1_000.0, 0.0)]);
        assert!(ceiling("high", ("p", &primary), &[("groq/y", &big)]).ceiling_holds);
        assert!(
            !ceiling("high", ("p", &primary), &[]).ceiling_holds,
            "no backup absorbs nothing"
        );
        let unbounded = RouteLoad::default();
        let c = ceiling("high", ("p", &primary), &[("free/x", &unbounded)]);
        assert!(c.ceiling_holds);
        assert_eq!(c.dimensions[0].backups_free, None);
    }

    #[test]
    fn the_primarys_load_is_its_own_entrys_not_its_whole_providers() {
        let primary = load(&[
            (Dimension::Rpm, "openai", 1_000.0, 900.0),
            (Dimension::Rpm, "openai/gpt-4o", 500.0, 100.0),
        ]);
        let backup = load(&[(Dimension::Rpm, "groq/x", 150.0, 0.0)]);
        let c = ceiling("high", ("openai/gpt-4o", &primary), &[("groq/x", &backup)]);
        assert_eq!(c.dimensions[0].primary_load_p95, 100.0);
        assert!(c.ceiling_holds, "{:?}", c.warnings);
    }

    #[test]
    fn a_provider_bucket_the_primary_shares_gives_its_load_back_to_the_backup() {
        // openai: 100 capacity, 90 used, 60 of it by the primary's own traffic.
        let primary = load(&[
            (Dimension::Rpm, "openai/gpt-4o", 100.0, 60.0),
            (Dimension::Rpm, "openai", 100.0, 90.0),
        ]);
        let mini = load(&[(Dimension::Rpm, "openai", 100.0, 90.0)]);
        let c = ceiling(
            "high",
            ("openai/gpt-4o", &primary),
            &[("openai/mini", &mini)],
        );
        assert_eq!(c.dimensions[0].backups_free, Some(70.0), "100 − (90 − 60)");
        assert!(c.ceiling_holds, "{:?}", c.warnings);
    }

    #[test]
    fn the_trend_ignores_the_minute_in_progress() {
        // 50 % every complete minute, the current one only begun.
        let mut flat = vec![50.0; 30];
        flat.push(2.0);
        let r = bucket_report(&use_of(flat));
        assert_eq!(r.slope_pct_per_hour, 0.0);
        assert_eq!(r.utilisation_pct_now, 2.0);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    }

    #[test]
    fn windows_and_sparklines() {
        assert_eq!(parse_window("30m"), Ok(1_800_000));
        assert_eq!(parse_window("1d"), Ok(86_400_000));
        assert!(parse_window("10").unwrap_err().contains("unit"));
        assert!(parse_window("9d").unwrap_err().contains("8d"));
        assert!(parse_window("5x").unwrap_err().contains("unknown unit"));
        assert_eq!(sparkline(&[0.0, 50.0, 100.0, 250.0], 60).line, "▁▂▄█");
        // 1 440 minutes in 60 characters: each the peak of its 24 minutes.
        let mut day = vec![0.0; 1_440];
        day[100] = 100.0;
        let line = sparkline(&day, 60).line;
        assert_eq!(line.chars().count(), 60);
        assert_eq!(line.chars().nth(4), Some('█'));
    }

    #[test]
    fn a_burst_far_below_capacity_still_rises_from_the_floor() {
        // 1 % of the contract, a burst to 4 %, back to 1 %: on a 0-100 % scale every
        // bar was `▁`.
        let mut minutes = vec![1.0; 20];
        minutes[8..12].copy_from_slice(&[2.5, 4.0, 4.0, 3.0]);
        let s = sparkline(&minutes, 60);
        assert_eq!(s.line, "▁▁▁▁▁▁▁▁▅██▆▁▁▁▁▁▁▁▁");
        assert_eq!((s.low, s.high), (1.0, 4.0));
        // A window that never moved has no range: its bars keep their level.
        assert_eq!(sparkline(&[50.0; 4], 60).line, "▅▅▅▅");
        assert_eq!(sparkline(&[0.0; 4], 60).line, "▁▁▁▁");
        assert_eq!(sparkline(&[], 60).line, "");
    }
}
