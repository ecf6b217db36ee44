//! `spillway report`: one self-contained HTML page with SVG plots from a results JSON
//! (`spillway bench suite` / `bench workload` output): throughput and p99.9 latency per
//! store per workload as grouped bar charts, and, when the JSON carries trace
//! characterizations, stack-distance histograms and working-set-over-time lines.
//!
//! The stack-distance chart draws distance 0 (an immediate re-access, e.g. the put
//! after a get) as a bar of its own, left of a log-x line chart of distances from 1 up:
//! on one log axis 0 has no place, and clamping it onto 1 would merge the two.
//!
//! The SVG is written by hand: the page needs a few bar and line charts, which is less
//! code than adapting a plotting crate's backend, and keeps the page dependency-free
//! (no scripts, no external assets).

use std::fmt::Write as _;

use serde::Deserialize;

/// One measured (workload, store) row.
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq)]
pub struct ResultRow {
    /// Workload name (operator or YCSB letter).
    pub workload: String,
    /// Store name.
    pub store: String,
    /// Ops replayed (measured).
    pub ops: u64,
    /// Seconds of the measured part.
    pub seconds: f64,
    /// Throughput.
    pub ops_per_sec: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// Maximum, µs.
    pub max_us: f64,
    /// Stores with several layouts: where the workload's state ended up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
}

/// Characterization series of one workload's trace, for plots.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq)]
pub struct TraceSeries {
    /// Workload name.
    pub workload: String,
    /// Stack-distance histogram: (distance bucket upper bound, count); `u64::MAX` or
    /// the largest value for cold misses is allowed.
    #[serde(default)]
    pub stack_distance: Vec<(u64, u64)>,
    /// Working-set size over time: (op index, distinct keys in the window ending there).
    #[serde(default)]
    pub working_set: Vec<(u64, u64)>,
}

/// What a report is drawn from.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq)]
pub struct ReportInput {
    /// Measured rows.
    pub rows: Vec<ResultRow>,
    /// Optional trace series.
    #[serde(default)]
    pub traces: Vec<TraceSeries>,
    /// Free-form description (machine, date, command).
    #[serde(default)]
    pub title: Option<String>,
    /// Machine description, if recorded.
    #[serde(default)]
    pub machine: Option<serde_json::Value>,
    /// Date, if recorded.
    #[serde(default)]
    pub date: Option<String>,
}

const PALETTE: [&str; 6] = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn fmt_num(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// A grouped bar chart: one group per category, one bar per series; `log` uses a
/// log10 axis (for latencies spanning decades).
fn grouped_bars(
    title: &str,
    unit: &str,
    categories: &[String],
    series: &[String],
    value: &dyn Fn(usize, usize) -> Option<f64>,
    log: bool,
) -> String {
    let (w, h, left, bottom, top) = (960.0, 360.0, 70.0, 110.0, 40.0);
    let plot_h = h - bottom - top;
    let plot_w = w - left - 20.0;
    let mut max = 0f64;
    let mut min_pos = f64::INFINITY;
    for c in 0..categories.len() {
        for s in 0..series.len() {
            if let Some(v) = value(c, s) {
                max = max.max(v);
                if v > 0.0 {
                    min_pos = min_pos.min(v);
                }
            }
        }
    }
    if max <= 0.0 {
        max = 1.0;
    }
    let (lo, hi) = if log {
        let lo = min_pos.min(max).max(1e-3).log10().floor();
        (lo, max.log10().ceil().max(lo + 1.0))
    } else {
        (0.0, max * 1.1)
    };
    let y = |v: f64| -> f64 {
        let t = if log { (v.max(10f64.powf(lo)).log10() - lo) / (hi - lo) } else { v / hi };
        top + plot_h * (1.0 - t.clamp(0.0, 1.0))
    };
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        s,
        r#"<text x="{left}" y="20" font-size="14" font-weight="bold">{}</text>"#,
        esc(title)
    );
    // Axis and grid.
    let ticks: Vec<f64> = if log {
        (lo as i64..=hi as i64).map(|e| 10f64.powi(e as i32)).collect()
    } else {
        (0..=5).map(|i| hi * f64::from(i) / 5.0).collect()
    };
    for t in ticks {
        let yy = y(t);
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + plot_w,
            left - 4.0,
            yy + 4.0,
            fmt_num(t)
        );
    }
    let _ = write!(
        s,
        r#"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"#,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        esc(unit)
    );
    let group_w = plot_w / categories.len().max(1) as f64;
    let bar_w = (group_w * 0.8 / series.len().max(1) as f64).max(1.0);
    for (c, cat) in categories.iter().enumerate() {
        let gx = left + group_w * c as f64 + group_w * 0.1;
        for si in 0..series.len() {
            if let Some(v) = value(c, si) {
                let x = gx + bar_w * si as f64;
                let yy = y(v);
                let _ = write!(
                    s,
                    r#"<rect x="{x:.1}" y="{yy:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} / {}: {} {}</title></rect>"#,
                    bar_w * 0.95,
                    (top + plot_h - yy).max(0.0),
                    PALETTE[si % PALETTE.len()],
                    esc(cat),
                    esc(&series[si]),
                    fmt_num(v),
                    esc(unit)
                );
            }
        }
        let lx = gx + group_w * 0.4;
        let ly = top + plot_h + 8.0;
        let _ = write!(
            s,
            r#"<text x="{lx:.1}" y="{ly:.1}" transform="rotate(40 {lx:.1} {ly:.1})">{}</text>"#,
            esc(cat)
        );
    }
    for (si, name) in series.iter().enumerate() {
        let x = left + 10.0 + 110.0 * si as f64;
        let _ = write!(
            s,
            r#"<rect x="{x}" y="26" width="10" height="10" fill="{}"/><text x="{}" y="35">{}</text>"#,
            PALETTE[si % PALETTE.len()],
            x + 14.0,
            esc(name)
        );
    }
    s.push_str("</svg>");
    s
}

/// A line chart of several (x, y) series with a log-x option.
fn lines(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
) -> String {
    let (w, h, left, bottom, top) = (960.0, 320.0, 70.0, 50.0, 40.0);
    let plot_h = h - bottom - top;
    let plot_w = w - left - 20.0;
    let tx = |x: f64| if log_x { (x.max(1.0)).log10() } else { x };
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0f64);
    for (_, pts) in series {
        for &(x, y) in pts {
            x0 = x0.min(tx(x));
            x1 = x1.max(tx(x));
            y1 = y1.max(y);
        }
    }
    if !x0.is_finite() || x1 <= x0 {
        x0 = 0.0;
        x1 = 1.0;
    }
    if y1 <= 0.0 {
        y1 = 1.0;
    }
    let px = |x: f64| left + plot_w * (tx(x) - x0) / (x1 - x0);
    let py = |y: f64| top + plot_h * (1.0 - y / (y1 * 1.05));
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        s,
        r#"<text x="{left}" y="20" font-size="14" font-weight="bold">{}</text>"#,
        esc(title)
    );
    let _ = write!(
        s,
        r##"<line x1="{left}" x2="{}" y1="{}" y2="{}" stroke="#999"/><text x="{}" y="{}" text-anchor="middle">{}</text>"##,
        left + plot_w,
        top + plot_h,
        top + plot_h,
        left + plot_w / 2.0,
        h - 10.0,
        esc(xlabel)
    );
    for i in 0..=4 {
        let v = y1 * 1.05 * f64::from(i) / 4.0;
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + plot_w,
            py(v),
            py(v),
            left - 4.0,
            py(v) + 4.0,
            fmt_num(v)
        );
    }
    let _ = write!(
        s,
        r#"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">{}</text>"#,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        esc(ylabel)
    );
    for (si, (name, pts)) in series.iter().enumerate() {
        let color = PALETTE[si % PALETTE.len()];
        let path: Vec<String> =
            pts.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"><title>{}</title></polyline>"#,
            path.join(" "),
            esc(name)
        );
        let x = left + 10.0 + 150.0 * si as f64;
        let _ = write!(
            s,
            r#"<rect x="{x}" y="26" width="10" height="10" fill="{color}"/><text x="{}" y="35">{}</text>"#,
            x + 14.0,
            esc(name)
        );
    }
    s.push_str("</svg>");
    s
}

/// The stack-distance chart: a bar per workload for distance 0, then a line per
/// workload over the buckets from distance 1 on a log x axis starting at 1. `series`
/// holds (bucket upper bound, fraction of accesses) per workload.
fn stack_distance_chart(series: &[(String, Vec<(f64, f64)>)]) -> String {
    let (w, h, left, bottom, top) = (960.0, 320.0, 70.0, 50.0, 40.0);
    let plot_h = h - bottom - top;
    // Distance-0 panel, a gap, then the log-x panel.
    let zero_w = 30.0 + 14.0 * series.len() as f64;
    let gap = 30.0;
    let x_left = left + zero_w + gap;
    let plot_w = w - x_left - 20.0;
    let y1 = series
        .iter()
        .flat_map(|(_, pts)| pts.iter().map(|&(_, y)| y))
        .fold(0f64, f64::max)
        .max(1e-9);
    let py = |y: f64| top + plot_h * (1.0 - y / (y1 * 1.05));
    let x1 = series
        .iter()
        .flat_map(|(_, pts)| pts.iter().map(|&(x, _)| x))
        .fold(1f64, f64::max)
        .log10()
        .max(1.0);
    let px = |x: f64| x_left + plot_w * x.max(1.0).log10() / x1;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        s,
        r#"<text x="{left}" y="20" font-size="14" font-weight="bold">Stack-distance histograms (fraction of accesses per distance bucket)</text>"#
    );
    for i in 0..=4 {
        let v = y1 * 1.05 * f64::from(i) / 4.0;
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x_left + plot_w,
            py(v),
            py(v),
            left - 4.0,
            py(v) + 4.0,
            fmt_num(v)
        );
    }
    let base = top + plot_h;
    let _ = write!(
        s,
        r##"<line x1="{left}" x2="{}" y1="{base}" y2="{base}" stroke="#999"/><line x1="{x_left}" x2="{}" y1="{base}" y2="{base}" stroke="#999"/>"##,
        left + zero_w,
        x_left + plot_w
    );
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{}" text-anchor="middle">0</text><text x="{:.1}" y="{}" text-anchor="middle">stack distance (log scale from 1)</text>"#,
        left + zero_w / 2.0,
        base + 14.0,
        x_left + plot_w / 2.0,
        h - 10.0
    );
    let mut e = 0i32;
    while f64::from(e) <= x1.ceil() {
        let x = px(10f64.powi(e));
        if x <= x_left + plot_w + 0.5 {
            let _ = write!(
                s,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{base}" y2="{}" stroke="#999"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
                base + 4.0,
                base + 14.0,
                if e < 3 { format!("{}", 10u64.pow(e as u32)) } else { fmt_num(10f64.powi(e)) }
            );
        }
        e += 1;
    }
    let _ = write!(
        s,
        r#"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">fraction</text>"#,
        top + plot_h / 2.0,
        top + plot_h / 2.0
    );
    let mut legend_x = x_left + 10.0;
    for (si, (name, pts)) in series.iter().enumerate() {
        let color = PALETTE[si % PALETTE.len()];
        let zero = pts.iter().filter(|&&(x, _)| x < 1.0).map(|&(_, y)| y).sum::<f64>();
        let bx = left + 15.0 + 14.0 * si as f64;
        let _ = write!(
            s,
            r#"<rect x="{bx:.1}" y="{:.1}" width="12" height="{:.1}" fill="{color}"><title>{}: distance 0: {}</title></rect>"#,
            py(zero),
            (base - py(zero)).max(0.0),
            esc(name),
            fmt_num(zero)
        );
        let path: Vec<String> = pts
            .iter()
            .filter(|&&(x, _)| x >= 1.0)
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"><title>{}</title></polyline>"#,
            path.join(" "),
            esc(name)
        );
        let x = legend_x;
        // About 6.5 px per character at 11 px sans-serif.
        legend_x += 34.0 + 6.5 * name.chars().count() as f64;
        let _ = write!(
            s,
            r#"<rect x="{x:.1}" y="26" width="10" height="10" fill="{color}"/><text x="{:.1}" y="35">{}</text>"#,
            x + 14.0,
            esc(name)
        );
    }
    s.push_str("</svg>");
    s
}

/// Renders the whole page.
pub fn render_html(input: &ReportInput) -> String {
    let mut workloads: Vec<String> = Vec::new();
    let mut stores: Vec<String> = Vec::new();
    for r in &input.rows {
        if !workloads.contains(&r.workload) {
            workloads.push(r.workload.clone());
        }
        if !stores.contains(&r.store) {
            stores.push(r.store.clone());
        }
    }
    let find = |c: usize, s: usize| {
        input.rows.iter().find(|r| r.workload == workloads[c] && r.store == stores[s])
    };
    let mut html = String::new();
    let title = input.title.clone().unwrap_or_else(|| "Spillway benchmark report".to_string());
    let _ = write!(
        html,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:sans-serif;margin:24px;max-width:1000px}}\
         table{{border-collapse:collapse;font-size:12px}}td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}\
         th{{background:#f4f4f4}}td:first-child,td:nth-child(2){{text-align:left}}</style></head><body><h1>{t}</h1>",
        t = esc(&title)
    );
    if let Some(d) = &input.date {
        let _ = write!(html, "<p>Date: {}</p>", esc(d));
    }
    if let Some(m) = &input.machine {
        let _ = write!(html, "<p>Machine: <code>{}</code></p>", esc(&m.to_string()));
    }
    if !input.rows.is_empty() {
        html.push_str(&grouped_bars(
            "Throughput per workload and store",
            "ops/s",
            &workloads,
            &stores,
            &|c, s| find(c, s).map(|r| r.ops_per_sec),
            false,
        ));
        html.push_str(&grouped_bars(
            "p99.9 latency per workload and store (log scale)",
            "µs",
            &workloads,
            &stores,
            &|c, s| find(c, s).map(|r| r.p999_us),
            true,
        ));
        html.push_str(
            "<h2>All rows</h2><table><tr><th>workload</th><th>store</th><th>ops</th><th>seconds</th>\
             <th>ops/s</th><th>p50 µs</th><th>p99 µs</th><th>p99.9 µs</th><th>max µs</th></tr>",
        );
        for r in &input.rows {
            let _ = write!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.0}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.1}</td></tr>",
                esc(&r.workload),
                esc(&r.store),
                r.ops,
                r.seconds,
                r.ops_per_sec,
                r.p50_us,
                r.p99_us,
                r.p999_us,
                r.max_us
            );
        }
        html.push_str("</table>");
    }
    let sd: Vec<(String, Vec<(f64, f64)>)> = input
        .traces
        .iter()
        .filter(|t| !t.stack_distance.is_empty())
        .map(|t| {
            let total: u64 = t.stack_distance.iter().map(|&(_, c)| c).sum::<u64>().max(1);
            (
                t.workload.clone(),
                t.stack_distance
                    .iter()
                    .map(|&(d, c)| (d as f64, c as f64 / total as f64))
                    .collect(),
            )
        })
        .collect();
    if !sd.is_empty() {
        html.push_str(&stack_distance_chart(&sd));
    }
    let ws: Vec<(String, Vec<(f64, f64)>)> = input
        .traces
        .iter()
        .filter(|t| !t.working_set.is_empty())
        .map(|t| {
            (t.workload.clone(), t.working_set.iter().map(|&(x, y)| (x as f64, y as f64)).collect())
        })
        .collect();
    if !ws.is_empty() {
        html.push_str(&lines("Working set over time", "op", "distinct keys", &ws, false));
    }
    html.push_str("</body></html>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(w: &str, s: &str, ops: f64, p: f64) -> ResultRow {
        ResultRow {
            workload: w.into(),
            store: s.into(),
            ops: 10,
            seconds: 1.0,
            ops_per_sec: ops,
            p50_us: 1.0,
            p99_us: 2.0,
            p999_us: p,
            max_us: 9.0,
            layout: None,
        }
    }

    /// Regression: distances 0 and 1 were drawn at the same x (log axis clamped at 1).
    #[test]
    fn stack_distance_zero_has_its_own_bar_apart_from_one() {
        let sd = vec![
            ("a".to_string(), vec![(0.0, 0.5), (1.0, 0.25), (3.0, 0.125), (7.0, 0.125)]),
            ("b".to_string(), vec![(0.0, 0.1), (1.0, 0.9)]),
        ];
        let svg = stack_distance_chart(&sd);
        assert!(svg.contains("a: distance 0: 0.50"), "{svg}");
        assert!(svg.contains("b: distance 0: 0.10"), "{svg}");
        assert!(svg.contains("log scale from 1"));
        // Each line starts at distance 1, at the left edge of the log panel, and holds
        // only the buckets from 1 on; the distance-0 bars lie left of that edge.
        let points: Vec<Vec<(f64, f64)>> = svg
            .split("points=\"")
            .skip(1)
            .map(|p| {
                p.split('"')
                    .next()
                    .unwrap()
                    .split(' ')
                    .map(|xy| {
                        let (x, y) = xy.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect();
        assert_eq!(points.iter().map(Vec::len).collect::<Vec<_>>(), vec![3, 1]);
        let edge = points[0][0].0;
        assert_eq!(points[1][0].0, edge);
        assert!(points[0][1].0 > edge && points[0][2].0 > points[0][1].0);
        let bars: Vec<f64> = svg
            .split("<rect x=\"")
            .skip(1)
            .filter(|r| r.contains("distance 0"))
            .map(|r| r.split('"').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(bars.len(), 2);
        assert!(bars.iter().all(|&x| x + 12.0 < edge), "{bars:?} vs {edge}");
    }

    #[test]
    fn page_has_a_bar_per_row_and_escapes_names() {
        let input = ReportInput {
            rows: vec![
                row("tumbling.keyed.incremental", "hashlog", 5e6, 1.5),
                row("tumbling.keyed.incremental", "rocksdb", 2e5, 40.0),
                row("ycsb-a", "hashlog", 3e6, 2.0),
                row("<x>", "rocksdb", 1e5, 80.0),
            ],
            traces: vec![TraceSeries {
                workload: "w".into(),
                stack_distance: vec![(1, 5), (10, 3), (100, 1)],
                working_set: vec![(0, 1), (100, 5)],
            }],
            ..ReportInput::default()
        };
        let html = render_html(&input);
        // Two bar charts with one rect per row each plus their legend squares, the
        // stack-distance chart's distance-0 bar and legend square, the working-set
        // chart's legend square.
        assert_eq!(html.matches("<rect").count(), 2 * 4 + 2 * 2 + 2 + 1);
        assert!(html.contains("&lt;x&gt;"));
        assert!(!html.contains("<x>"));
        assert_eq!(html.matches("<polyline").count(), 2);
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.contains("<script"));
    }
}
