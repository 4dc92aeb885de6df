//! SVG plots of a scenario, drawn with plotters' SVG backend (no fonts loaded, no bitmaps):
//! the latency distribution of each side on an HDR-style "nines" axis (the tail is where a
//! proxy shows its cost) and the throughput of each side over time (a stall or a warming
//! cache shows there).

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use crate::report::{ListenReport, ScenarioReport, SideReport};
use crate::scenario::Side;

const SIZE: (u32, u32) = (960, 540);

/// Line colours of sweeps and bench plots, in order.
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(127, 127, 127),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
];

fn color(side: Side, notify: bool) -> RGBColor {
    match (side, notify) {
        (Side::Proxy, false) => RGBColor(31, 119, 180),
        (Side::Direct, false) => RGBColor(44, 160, 44),
        (Side::Ceiling, _) => RGBColor(127, 127, 127),
        (Side::Proxy, true) => RGBColor(214, 39, 40),
        (Side::Direct, true) => RGBColor(255, 127, 14),
    }
}

struct Series {
    label: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
}

/// Every latency distribution of the scenario: requests per side, and notification delivery
/// per side where there were listeners.
fn latency_series(r: &ScenarioReport) -> Vec<Series> {
    series(r, ("requests", |s| &s.latency_curve), ("notifications", |l| &l.latency_curve))
}

fn throughput_series(r: &ScenarioReport) -> Vec<Series> {
    series(r, ("req/s", |s| &s.throughput), ("notifications/s", |l| &l.throughput))
}

type Points = Vec<(f64, f64)>;

/// One series per side for requests and, where there were listeners, one for notifications.
fn series(
    r: &ScenarioReport,
    (req_label, req): (&str, fn(&SideReport) -> &Points),
    (note_label, note): (&str, fn(&ListenReport) -> &Points),
) -> Vec<Series> {
    let mut out = Vec::new();
    for s in &r.sides {
        if !req(s).is_empty() {
            out.push(Series {
                label: format!("{} {req_label}", s.side),
                color: color(s.side, false),
                points: req(s).clone(),
            });
        }
        if let Some(l) = &s.listen
            && !note(l).is_empty()
        {
            out.push(Series {
                label: format!("{} {note_label}", s.side),
                color: color(s.side, true),
                points: note(l).clone(),
            });
        }
    }
    out
}

/// "Nines" of quantile `q`: 0 for 0 %, 1 for 90 %, 2 for 99 %, …
fn nines(q: f64) -> f64 {
    -(1.0 - q).max(1e-9).log10()
}

fn nines_label(x: &f64) -> String {
    match x.round() as i64 {
        0 => "0%".into(),
        1 => "90%".into(),
        2 => "99%".into(),
        3 => "99.9%".into(),
        4 => "99.99%".into(),
        _ => String::new(),
    }
}

/// Draws `NAME-latency.svg`; false when there is nothing to draw.
pub fn latency(r: &ScenarioReport, path: &Path) -> Result<bool> {
    draw_latency(&format!("{}: latency distribution", r.name), latency_series(r), path)
}

/// Draws latency distributions given as `[quantile, ms]` lines on the "nines" axis; false
/// when there is nothing to draw.
pub fn latency_lines(caption: &str, lines: Vec<SweepLine>, path: &Path) -> Result<bool> {
    let series = lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| Series { label: l.label, color: PALETTE[i % PALETTE.len()], points: l.points })
        .collect();
    draw_latency(caption, series, path)
}

fn draw_latency(caption: &str, series: Vec<Series>, path: &Path) -> Result<bool> {
    if series.is_empty() {
        return Ok(false);
    }
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (lo, hi) = ys.fold((f64::MAX, 0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let lo = (lo.max(0.001) * 0.8).max(0.001);
    let hi = (hi * 1.25).max(lo * 10.0);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..4f64, (lo..hi).log_scale())
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (ms, log scale)")
        .x_labels(5)
        .x_label_formatter(&nines_label)
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for s in series {
        let c = s.color;
        chart
            .draw_series(LineSeries::new(s.points.iter().map(|(q, ms)| (nines(*q), ms.max(lo))), c.stroke_width(2)))
            .map_err(|e| anyhow!("{e}"))?
            .label(s.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(true)
}

/// Draws `NAME-throughput.svg`; false when there is nothing to draw.
pub fn throughput(r: &ScenarioReport, path: &Path) -> Result<bool> {
    let series = throughput_series(r);
    if series.is_empty() {
        return Ok(false);
    }
    let chart = Chart {
        caption: format!("{}: throughput over time", r.name),
        x_desc: "seconds since measurement began",
        y_desc: "per second",
        log_y: false,
        legend: SeriesLabelPosition::UpperRight,
    };
    chart.draw(series, path)?;
    Ok(true)
}

/// A line chart: linear x from 0, y linear from 0 or logarithmic.
struct Chart {
    caption: String,
    x_desc: &'static str,
    y_desc: &'static str,
    log_y: bool,
    legend: SeriesLabelPosition,
}

impl Chart {
    fn draw(self, series: Vec<Series>, path: &Path) -> Result<()> {
        let points = series.iter().flat_map(|s| s.points.iter());
        let (xmax, ymin, ymax) =
            points.fold((0f64, f64::MAX, 0f64), |(x, lo, hi), p| (x.max(p.0), lo.min(p.1), hi.max(p.1)));
        let x = 0f64..(xmax * 1.02).max(0.1);
        let root = SVGBackend::new(path, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let mut builder = ChartBuilder::on(&root);
        builder.caption(&self.caption, ("sans-serif", 22)).margin(16).x_label_area_size(44).y_label_area_size(80);
        // The two y axes are different types to plotters; the drawing is the same.
        macro_rules! finish {
            ($chart:expr) => {{
                let mut chart = $chart.map_err(|e| anyhow!("{e}"))?;
                chart
                    .configure_mesh()
                    .x_desc(self.x_desc)
                    .y_desc(self.y_desc)
                    .x_label_formatter(&|x| format!("{x:.0}"))
                    .y_label_formatter(&|y| format!("{y}"))
                    .draw()
                    .map_err(|e| anyhow!("{e}"))?;
                for s in series {
                    let c = s.color;
                    chart
                        .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
                        .map_err(|e| anyhow!("{e}"))?
                        .label(s.label)
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
                }
                chart
                    .configure_series_labels()
                    .position(self.legend)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .draw()
                    .map_err(|e| anyhow!("{e}"))?;
            }};
        }
        if self.log_y {
            let lo = (ymin.max(0.001) * 0.8).max(0.001);
            finish!(builder.build_cartesian_2d(x, (lo..(ymax * 1.5).max(lo * 10.0)).log_scale()));
        } else {
            finish!(builder.build_cartesian_2d(x, 0f64..(ymax * 1.4).max(1.0)));
        }
        root.present().map_err(|e| anyhow!("{e}"))?;
        Ok(())
    }
}

/// One measured line of a sweep: its label and its (x, y) points.
pub struct SweepLine {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Draws a sweep (latency against offered rate, RSS against listeners, …), one line each.
pub fn sweep(
    caption: &str,
    x_desc: &'static str,
    y_desc: &'static str,
    log_y: bool,
    lines: Vec<SweepLine>,
    path: &Path,
) -> Result<()> {
    let series = lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| Series { label: l.label, color: PALETTE[i % PALETTE.len()], points: l.points })
        .collect();
    let chart = Chart { caption: caption.to_owned(), x_desc, y_desc, log_y, legend: SeriesLabelPosition::UpperLeft };
    chart.draw(series, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nines_axis() {
        assert!((nines(0.0) - 0.0).abs() < 1e-12);
        assert!((nines(0.9) - 1.0).abs() < 1e-9);
        assert!((nines(0.999) - 3.0).abs() < 1e-9);
        assert_eq!(nines_label(&2.0), "99%");
    }
}
