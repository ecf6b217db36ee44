//! Reading the results: the table, each policy's mean hit ratio, and per cell whether
//! W-TinyLFU meets its target (issue target: on every trace and capacity, adaptive
//! W-TinyLFU's hit ratio is at least the best of LRU, ARC, S3-FIFO and LIRS minus one
//! percentage point, and its mean over all cells is the highest).

use std::fmt::Write;

use super::SimRow;

/// The policy the target is about.
pub const TARGET_POLICY: &str = "wtinylfu";
/// The policies it is measured against.
pub const REFERENCE_POLICIES: [&str; 4] = ["lru", "arc", "s3fifo", "lirs"];
/// How far below the best reference policy it may be, in percentage points.
pub const TOLERANCE_POINTS: f64 = 1.0;

/// The results as a text table, one line per row.
pub fn table(rows: &[SimRow]) -> String {
    let tw = rows.iter().map(|r| r.trace.len()).max().unwrap_or(0).max("trace".len());
    let cw = rows.iter().map(|r| capacity_label(r).len()).max().unwrap_or(0).max(8);
    let pw = rows.iter().map(|r| r.policy.len()).max().unwrap_or(0).max(6);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<tw$}  {:<cw$}  {:<pw$}  {:>10}  {:>10}  {:>9}",
        "trace", "capacity", "policy", "accesses", "hits", "hit ratio"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<tw$}  {:<cw$}  {:<pw$}  {:>10}  {:>10}  {:>8.2}%",
            r.trace,
            capacity_label(r),
            r.policy,
            r.accesses,
            r.hits,
            r.hit_ratio * 100.0
        );
    }
    out
}

fn capacity_label(r: &SimRow) -> String {
    label(&r.capacity_spec, r.capacity)
}

/// `5% (497)`, or `5000` when given in entries.
fn label(spec: &str, entries: u64) -> String {
    if spec == entries.to_string() {
        spec.to_string()
    } else {
        format!("{spec} ({entries})")
    }
}

/// A policy's mean hit ratio over the cells it ran in.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyMean {
    /// The policy.
    pub policy: String,
    /// The mean of its hit ratios (a fraction).
    pub mean_hit_ratio: f64,
    /// Cells averaged.
    pub cells: usize,
}

/// Each policy's mean hit ratio, highest first (ties in order of appearance).
pub fn means(rows: &[SimRow]) -> Vec<PolicyMean> {
    let mut out: Vec<PolicyMean> = Vec::new();
    for r in rows {
        match out.iter_mut().find(|m| m.policy == r.policy) {
            Some(m) => {
                m.mean_hit_ratio += r.hit_ratio;
                m.cells += 1;
            }
            None => out.push(PolicyMean {
                policy: r.policy.clone(),
                mean_hit_ratio: r.hit_ratio,
                cells: 1,
            }),
        }
    }
    for m in &mut out {
        m.mean_hit_ratio /= m.cells as f64;
    }
    out.sort_by(|a, b| b.mean_hit_ratio.total_cmp(&a.mean_hit_ratio));
    out
}

/// W-TinyLFU against the best reference policy in one (trace, capacity) cell.
#[derive(Clone, Debug, PartialEq)]
pub struct CellVerdict {
    /// The trace.
    pub trace: String,
    /// The capacity as given.
    pub capacity_spec: String,
    /// The capacity in entries.
    pub capacity: u64,
    /// W-TinyLFU's hit ratio.
    pub target: f64,
    /// The best reference policy and its hit ratio.
    pub best: (String, f64),
}

impl CellVerdict {
    /// W-TinyLFU's hit ratio minus the best reference's, in percentage points.
    pub fn gap_points(&self) -> f64 {
        (self.target - self.best.1) * 100.0
    }

    /// Whether W-TinyLFU is at most [`TOLERANCE_POINTS`] below the best reference.
    pub fn met(&self) -> bool {
        self.gap_points() >= -TOLERANCE_POINTS - 1e-9
    }
}

/// One verdict per cell in which W-TinyLFU and at least one reference policy ran.
pub fn verdicts(rows: &[SimRow]) -> Vec<CellVerdict> {
    let mut out = Vec::new();
    for t in rows.iter().filter(|r| r.policy == TARGET_POLICY) {
        let best = rows
            .iter()
            .filter(|r| r.trace == t.trace && r.capacity_spec == t.capacity_spec)
            .filter(|r| REFERENCE_POLICIES.contains(&r.policy.as_str()))
            .max_by(|a, b| a.hit_ratio.total_cmp(&b.hit_ratio));
        if let Some(b) = best {
            out.push(CellVerdict {
                trace: t.trace.clone(),
                capacity_spec: t.capacity_spec.clone(),
                capacity: t.capacity,
                target: t.hit_ratio,
                best: (b.policy.clone(), b.hit_ratio),
            });
        }
    }
    out
}

/// The lines printed after the table: means, then the per-cell verdicts.
pub fn summary_lines(rows: &[SimRow]) -> Vec<String> {
    let mut out = Vec::new();
    let means = means(rows);
    if means.is_empty() {
        return out;
    }
    let list: Vec<String> =
        means.iter().map(|m| format!("{} {:.2}%", m.policy, m.mean_hit_ratio * 100.0)).collect();
    out.push(format!(
        "mean hit ratio over {} cells (trace x capacity): {}",
        means[0].cells,
        list.join(", ")
    ));
    let verdicts = verdicts(rows);
    if verdicts.is_empty() {
        return out;
    }
    let target = means.iter().find(|m| m.policy == TARGET_POLICY).expect("target ran");
    let best_ref = means.iter().find(|m| REFERENCE_POLICIES.contains(&m.policy.as_str()));
    if let Some(r) = best_ref {
        let d = (target.mean_hit_ratio - r.mean_hit_ratio) * 100.0;
        out.push(if d >= 0.0 {
            format!(
                "{TARGET_POLICY}'s mean is above every reference policy's (+{d:.2} points over \
                 {}, the best of them)",
                r.policy
            )
        } else {
            format!("{TARGET_POLICY}'s mean is {:.2} points below {}'s", -d, r.policy)
        });
    }
    out.push(format!(
        "{TARGET_POLICY} against the best of {} per cell (target: at most {TOLERANCE_POINTS} point below):",
        REFERENCE_POLICIES.join(", ")
    ));
    let tw = verdicts.iter().map(|v| v.trace.len()).max().unwrap_or(0);
    for v in &verdicts {
        let cap = label(&v.capacity_spec, v.capacity);
        out.push(format!(
            "  {:<tw$}  {:<14} {TARGET_POLICY} {:>6.2}%  best {:<6} {:>6.2}%  {:>+6.2} points  {}",
            v.trace,
            cap,
            v.target * 100.0,
            v.best.0,
            v.best.1 * 100.0,
            v.gap_points(),
            if v.met() { "ok" } else { "MISSED" }
        ));
    }
    let met = verdicts.iter().filter(|v| v.met()).count();
    out.push(format!("target met on {met} of {} cells", verdicts.len()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(trace: &str, cap: &str, policy: &str, hits: u64) -> SimRow {
        SimRow {
            trace: trace.into(),
            capacity_spec: cap.into(),
            capacity: 10,
            policy: policy.into(),
            accesses: 1000,
            hits,
            hit_ratio: hits as f64 / 1000.0,
        }
    }

    #[test]
    fn verdicts_compare_with_the_best_reference_only() {
        let rows = vec![
            row("a", "1%", "wtinylfu", 300),
            row("a", "1%", "wtinylfu-fixed", 500),
            row("a", "1%", "lru", 200),
            row("a", "1%", "arc", 309),
            row("a", "5%", "wtinylfu", 400),
            row("a", "5%", "wtinylfu-fixed", 500),
            row("a", "5%", "lru", 411),
            row("a", "5%", "arc", 100),
        ];
        let v = verdicts(&rows);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].best, ("arc".to_string(), 0.309));
        assert!((v[0].gap_points() + 0.9).abs() < 1e-9);
        assert!(v[0].met());
        assert_eq!(v[1].best.0, "lru");
        assert!(!v[1].met(), "1.1 points below");
        let m = means(&rows);
        assert_eq!(m[0].policy, "wtinylfu-fixed");
        assert_eq!(m.iter().find(|m| m.policy == "wtinylfu").unwrap().mean_hit_ratio, 0.35);
        let lines = summary_lines(&rows);
        assert!(lines[0].starts_with("mean hit ratio over 2 cells"), "{lines:?}");
        assert!(lines[1].contains("above every") && lines[1].contains("over lru"), "{lines:?}");
        assert!(lines.last().unwrap().contains("met on 1 of 2"), "{lines:?}");
        assert!(lines.iter().any(|l| l.contains("MISSED")), "{lines:?}");
        let t = table(&rows);
        assert!(t.lines().nth(1).unwrap().contains("1% (10)"), "{t}");
        assert!(t.contains("30.00%"), "{t}");
    }
}
