//! SVG charts of the outage experiment and of many runs of one scenario, drawn with
//! plotters' SVG backend (feature `charts`, on by default).
//!
//! - [`write_experiment_charts`]: per outage model, the requests per second of every policy
//!   over virtual time with the outage window shaded ([`requests_per_second_svg`]), and
//!   where each policy lands on success against requests per completed turn
//!   ([`success_vs_amplification_svg`]).
//! - [`write_scenario_charts`]: for [`run_many`](rebound_sim::run_many)'s runs, the distribution
//!   of the time to completion ([`time_to_completion_svg`]) and the histogram of attempts
//!   ([`attempts_svg`]).
//!
//! The charts are pure functions of their input: the same report writes the same bytes.
//! They are made to be read in grayscale too: lines differ in dash and width as well as in
//! colour, markers in shape.
//!
//! ```
//! use rebound_study::compare::{run_experiment_with_timelines, ExperimentConfig, OutageModel};
//! use rebound_study::charts::requests_per_second_svg;
//!
//! let config = ExperimentConfig::default()
//!     .with_agents(20)
//!     .with_models(OutageModel::standard().into_iter().take(1).collect());
//! let (report, timelines) = run_experiment_with_timelines(&config).unwrap();
//! let svg = requests_per_second_svg(&report, &timelines, "blip").unwrap();
//! assert!(svg.contains("requests / s"));
//! ```

use crate::compare::{OutageModel, Policy, Report, Row, Timeline};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use rebound_sim::stats::{percentile, Stats};
use std::path::{Path, PathBuf};

/// Why charts could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChartError {
    /// The report has no model of that name.
    #[error("no outage model named {model:?} in the report")]
    UnknownModel {
        /// The name asked for.
        model: String,
    },
    /// Plotting failed (a bug: the SVG backend draws into memory).
    #[error("cannot draw the chart {chart}: {source}")]
    Draw {
        /// The chart's title.
        chart: String,
        /// What plotters reported.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The chart could not be written.
    #[error("cannot write the chart {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), Box<dyn std::error::Error + Send + Sync>>;

const FONT: &str = "sans-serif";
/// rebound's colour (Okabe–Ito vermillion: mid-gray in grayscale, against black peers).
const REBOUND: RGBColor = RGBColor(213, 94, 0);
/// The budgeted peers' colour (Okabe–Ito blue).
const BUDGETED: RGBColor = RGBColor(0, 114, 178);
const SHADE: RGBColor = RGBColor(222, 222, 222);
const GRID: RGBColor = RGBColor(235, 235, 235);
const FAILED: RGBColor = RGBColor(190, 190, 190);

fn text(size: u32) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).color(&BLACK)
}

fn bold(size: u32) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font().style(FontStyle::Bold)).color(&BLACK)
}

fn left_top(style: TextStyle<'static>) -> TextStyle<'static> {
    style.pos(Pos::new(HPos::Left, VPos::Top))
}

/// The width in pixels a line of `text` at `size` is laid out with (plotters' own estimate
/// without font files, which is generous for a sans-serif font).
fn text_width(text: &str, size: u32) -> i32 {
    let em = f64::from(size) / 1.24 / 1.24;
    (em * 0.7 * text.chars().count() as f64).round() as i32
}

fn render(
    title: &str,
    size: (u32, u32),
    draw: impl FnOnce(&Area<'_>) -> Drawn,
) -> Result<String, ChartError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        let drawn = root
            .fill(&WHITE)
            .map_err(Into::into)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(Into::into));
        drawn.map_err(|source| ChartError::Draw {
            chart: title.to_owned(),
            source,
        })?;
    }
    Ok(svg)
}

/// A policy's name without the table's Markdown emphasis.
fn policy_name(policy: Policy) -> String {
    policy.label().to_owned()
}

/// The smallest "nice" number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten) at
/// least `x`.
fn nice_ceil(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(x.log10().floor());
    for step in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if step * power >= x {
            return step * power;
        }
    }
    10.0 * power
}

fn model<'r>(report: &'r Report, name: &str) -> Result<&'r OutageModel, ChartError> {
    report
        .config
        .models
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| ChartError::UnknownModel {
            model: name.to_owned(),
        })
}

fn seconds(ms: u64) -> String {
    if ms % 1_000 == 0 {
        format!("{}", ms / 1_000)
    } else {
        format!("{:.1}", ms as f64 / 1_000.0)
    }
}

/// The outage windows of a model, in virtual ms.
fn windows(model: &OutageModel) -> Vec<(u64, u64)> {
    model.outage_windows_ms()
}

/// Requests per second over virtual time in outage model `model`: one small panel per
/// policy on the same axes (eleven lines on one plot hide each other), each with rebound's
/// line dashed for reference and the outage window shaded.
///
/// # Errors
///
/// [`ChartError::UnknownModel`] when the report has no such model; [`ChartError::Draw`] on a
/// bug.
pub fn requests_per_second_svg(
    report: &Report,
    timelines: &[Timeline],
    model_name: &str,
) -> Result<String, ChartError> {
    let model = model(report, model_name)?;
    let lines: Vec<&Timeline> = timelines.iter().filter(|t| t.model == model.name).collect();
    let rebound = lines.iter().find(|t| t.policy == Policy::Rebound).copied();
    let last_second = lines.iter().map(|t| t.per_sec.len()).max().unwrap_or(0);
    let x_max = nice_ceil((last_second as f64).max(10.0));
    let y_max =
        nice_ceil(f64::from(lines.iter().map(|t| t.peak()).max().unwrap_or(0)).max(10.0) * 1.05);
    let windows = windows(model);
    let title = format!("{}: requests per second, by policy", model.name);
    let cols = 4;
    let cells = lines.len() + 1;
    let rows = cells.div_ceil(cols);
    let panel = (350u32, 250u32);
    let header = 80u32;
    let size = (panel.0 * cols as u32, header + panel.1 * rows as u32);
    let agents = report.config.agents;
    render(&title, size, |root| {
        let (top, body) = root.split_vertically(header);
        top.draw(&Text::new(title.clone(), (20, 14), left_top(bold(26))))?;
        top.draw(&Text::new(
            format!(
                "{} ({} agents starting over the first {} s; seed {})",
                model.description,
                agents,
                seconds(report.config.stagger_ms),
                report.config.seed
            ),
            (20, 50),
            left_top(text(16)),
        ))?;
        let areas = body.split_evenly((rows, cols));
        for (line, area) in lines.iter().zip(&areas) {
            let own = line.policy == Policy::Rebound;
            let mut chart = ChartBuilder::on(area)
                .caption(
                    policy_name(line.policy),
                    if own { bold(17) } else { text(17) },
                )
                .margin(8)
                .margin_right(16)
                .x_label_area_size(38)
                .y_label_area_size(52)
                .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
            for &(from, until) in &windows {
                let (from, until) = (from as f64 / 1_000.0, (until as f64 / 1_000.0).min(x_max));
                if from < until {
                    chart.draw_series(std::iter::once(Rectangle::new(
                        [(from, 0.0), (until, y_max)],
                        SHADE.filled(),
                    )))?;
                }
            }
            chart
                .configure_mesh()
                .x_desc("virtual time (s)")
                .y_desc("requests / s")
                .axis_desc_style(text(14))
                .label_style(text(13))
                .x_labels(6)
                .y_labels(5)
                .x_label_formatter(&|x| number(*x))
                .y_label_formatter(&|y| number(*y))
                .light_line_style(TRANSPARENT)
                .bold_line_style(GRID)
                .draw()?;
            let colour = if own { REBOUND } else { BLACK };
            chart.draw_series(LineSeries::new(
                steps(&line.per_sec, x_max),
                colour.stroke_width(2),
            ))?;
            // rebound's dashes on top: where the lines coincide both stay visible.
            if let (Some(reference), false) = (rebound, own) {
                chart.draw_series(DashedLineSeries::new(
                    steps(&reference.per_sec, x_max),
                    6,
                    4,
                    REBOUND.stroke_width(2),
                ))?;
            }
            let peak = format!("peak {} / s", line.peak());
            let (px, py) = chart.backend_coord(&(x_max, y_max));
            root.draw(&Text::new(
                peak,
                (px - 6, py + 4),
                text(13).pos(Pos::new(HPos::Right, VPos::Top)),
            ))?;
        }
        if let Some(area) = areas.get(lines.len()) {
            legend_cell(area, &windows, x_max)?;
        }
        Ok(())
    })
}

/// The legend of the requests-per-second panels, in the cell after the last panel.
fn legend_cell(area: &Area<'_>, windows: &[(u64, u64)], x_max: f64) -> Drawn {
    let (x, mut y) = (24, 34);
    area.draw(&Text::new("How to read", (x, y), left_top(bold(16))))?;
    y += 30;
    area.draw(&PathElement::new(
        vec![(x, y + 7), (x + 40, y + 7)],
        BLACK.stroke_width(2),
    ))?;
    area.draw(&Text::new(
        "the panel's policy",
        (x + 50, y),
        left_top(text(14)),
    ))?;
    y += 26;
    area.draw(&DashedPathElement::new(
        vec![(x, y + 7), (x + 40, y + 7)],
        6,
        4,
        REBOUND.stroke_width(2),
    ))?;
    area.draw(&Text::new(
        "rebound (its own panel: solid)",
        (x + 50, y),
        left_top(text(14)),
    ))?;
    y += 26;
    let shade_text = match windows {
        [] => "no outage window: the failures are per agent".to_owned(),
        [(from, until), ..] if (*until as f64 / 1_000.0) > x_max => {
            format!(
                "outage {}–{} s (runs past the edge)",
                seconds(*from),
                seconds(*until)
            )
        }
        [(from, until), ..] => format!("outage window, {}–{} s", seconds(*from), seconds(*until)),
    };
    if !windows.is_empty() {
        area.draw(&Rectangle::new([(x, y), (x + 40, y + 14)], SHADE.filled()))?;
    }
    area.draw(&Text::new(shade_text, (x + 50, y), left_top(text(14))))?;
    y += 34;
    for line in [
        "Requests: first attempts and retries,",
        "counted in the second they were sent.",
        "Same axes in every panel.",
    ] {
        area.draw(&Text::new(line, (x, y), left_top(text(13))))?;
        y += 18;
    }
    Ok(())
}

/// A per-second series as a step line from 0 to `x_max` seconds.
fn steps(per_sec: &[u32], x_max: f64) -> Vec<(f64, f64)> {
    let mut points = Vec::with_capacity(per_sec.len() * 2 + 2);
    for (i, &n) in per_sec.iter().enumerate() {
        points.push((i as f64, f64::from(n)));
        points.push(((i + 1) as f64, f64::from(n)));
    }
    let end = per_sec.len() as f64;
    points.push((end, 0.0));
    if end < x_max {
        points.push((x_max, 0.0));
    }
    points
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    Rebound,
    ReboundWithoutBudget,
    Peer,
    BudgetedPeer,
}

impl Mark {
    fn of(policy: Policy) -> Mark {
        match policy {
            Policy::Rebound => Mark::Rebound,
            Policy::ReboundWithoutBudget => Mark::ReboundWithoutBudget,
            Policy::Peer(p) if p.is_budgeted() => Mark::BudgetedPeer,
            Policy::Peer(_) => Mark::Peer,
        }
    }

    fn draw(self, area: &Area<'_>, at: (i32, i32)) -> Drawn {
        match self {
            Mark::Rebound => {
                area.draw(&Circle::new(at, 8, REBOUND.filled()))?;
                area.draw(&Circle::new(at, 8, BLACK.stroke_width(1)))?;
            }
            Mark::ReboundWithoutBudget => {
                area.draw(&TriangleMarker::new(at, 9, REBOUND.stroke_width(2)))?;
            }
            Mark::Peer => {
                area.draw(&Circle::new(at, 6, BLACK.stroke_width(2)))?;
            }
            Mark::BudgetedPeer => {
                area.draw(&Rectangle::new(
                    [(at.0 - 5, at.1 - 5), (at.0 + 5, at.1 + 5)],
                    BUDGETED.filled(),
                ))?;
            }
        }
        Ok(())
    }

    fn label(self) -> &'static str {
        match self {
            Mark::Rebound => "rebound",
            Mark::ReboundWithoutBudget => "rebound, no budget",
            Mark::Peer => "a peer's retry loop",
            Mark::BudgetedPeer => "a peer with a retry budget",
        }
    }
}

/// Where a policy that completed turns lands: requests per completed turn, success in %.
struct Spot {
    policy: Policy,
    per_turn: f64,
    success: f64,
}

/// The policies that completed a turn, rebound first (its label is placed first).
fn spots(rows: &[&Row]) -> Vec<Spot> {
    let mut spots: Vec<Spot> = rows
        .iter()
        .filter_map(|r| {
            Some(Spot {
                policy: r.policy,
                per_turn: r.requests_per_turn()?,
                success: r.success_rate() * 100.0,
            })
        })
        .collect();
    spots.sort_by_key(|s| s.policy != Policy::Rebound);
    spots
}

/// One marker position with the policies drawn there and where their names go.
struct Placed {
    at: (i32, i32),
    names: Vec<(String, Mark)>,
    label: Boxed,
    /// Where the names did not fit beside the marker: the number drawn there instead,
    /// whose names the key under the chart gives.
    number: Option<usize>,
}

#[derive(Clone, Copy)]
struct Boxed {
    x0: i32,
    y0: i32,
    x1: i32,
    y1: i32,
}

impl Boxed {
    fn overlaps(&self, other: &Boxed) -> bool {
        self.x0 < other.x1 && other.x0 < self.x1 && self.y0 < other.y1 && other.y0 < self.y1
    }
}

/// Success against requests per completed turn in outage model `model`: one marker per
/// policy (rebound's large and coloured), policies on the same spot named together beside
/// it (or, where spots crowd, by a number the key under the chart names), and the policies
/// that completed no turn (no requests per completed turn to plot) listed below.
///
/// # Errors
///
/// [`ChartError::UnknownModel`] when the report has no such model; [`ChartError::Draw`] on a
/// bug.
pub fn success_vs_amplification_svg(
    report: &Report,
    model_name: &str,
) -> Result<String, ChartError> {
    let model = model(report, model_name)?;
    let rows: Vec<&Row> = report
        .rows
        .iter()
        .filter(|r| r.model == model.name)
        .collect();
    let spots = spots(&rows);
    let none: Vec<String> = rows
        .iter()
        .filter(|r| r.requests_per_turn().is_none())
        .map(|r| policy_name(r.policy))
        .collect();
    let title = format!(
        "{}: success against requests per completed turn",
        model.name
    );
    let hi = spots.iter().map(|s| s.per_turn).fold(1f64, f64::max);
    // The axis starts at 1 request per turn, the least there can be, so small differences
    // look small. Amplification is a ratio: on a log axis when it reaches past 5.
    let log = hi > 5.0;
    let (x_lo, x_hi) = if log {
        (1.0, nice_ceil(hi * 1.5))
    } else {
        (1.0, (hi * 1.3).max(2.0))
    };
    // The foot (legend, the policies not plotted, the key of numbered spots) is as tall as
    // its lines: drawn once to count them, again if they need more room.
    let mut foot_height = 100u32;
    loop {
        let needed = std::cell::Cell::new(0u32);
        let svg = render(&title, (1000, 80 + 520 + foot_height), |root| {
            draw_scatter(
                root,
                report,
                model,
                &spots,
                &none,
                (log, x_lo, x_hi),
                &needed,
            )
        })?;
        if needed.get() <= foot_height {
            return Ok(svg);
        }
        foot_height = needed.get();
    }
}

#[allow(clippy::too_many_arguments)]
fn draw_scatter(
    root: &Area<'_>,
    report: &Report,
    model: &OutageModel,
    spots: &[Spot],
    none: &[String],
    (log, x_lo, x_hi): (bool, f64, f64),
    needed: &std::cell::Cell<u32>,
) -> Drawn {
    let title = format!(
        "{}: success against requests per completed turn",
        model.name
    );
    {
        root.draw(&Text::new(title, (20, 14), left_top(bold(26))))?;
        root.draw(&Text::new(
            format!(
                "{} ({} agents; seed {}). Up and to the left is better.",
                model.description, report.config.agents, report.config.seed
            ),
            (20, 50),
            left_top(text(16)),
        ))?;
        let (_, rest) = root.split_vertically(80);
        let (plot, foot) = rest.split_vertically(520);
        let x_desc = if log {
            "requests per completed turn (log scale)"
        } else {
            "requests per completed turn"
        };
        let mut builder = ChartBuilder::on(&plot);
        builder
            .margin(10)
            .margin_right(30)
            .x_label_area_size(45)
            .y_label_area_size(70);
        let place = |to_px: &dyn Fn(f64, f64) -> (i32, i32), bounds: Boxed| {
            place_labels(spots, to_px, bounds)
        };
        let placed = if log {
            let mut chart = builder.build_cartesian_2d(
                (x_lo..x_hi)
                    .log_scale()
                    .with_key_points(log_ticks(x_lo, x_hi)),
                0f64..105f64,
            )?;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc("success (% of turns completed)")
                .axis_desc_style(text(16))
                .label_style(text(14))
                .x_label_formatter(&|x| per_turn_label(*x))
                .y_label_formatter(&|y| format!("{y:.0}"))
                .light_line_style(TRANSPARENT)
                .bold_line_style(GRID)
                .draw()?;
            let (x0, y0) = chart.backend_coord(&(x_lo, 105.0));
            let (x1, y1) = chart.backend_coord(&(x_hi, 0.0));
            place(
                &|x, y| chart.backend_coord(&(x, y)),
                Boxed { x0, y0, x1, y1 },
            )
        } else {
            let mut chart = builder.build_cartesian_2d(x_lo..x_hi, 0f64..105f64)?;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc("success (% of turns completed)")
                .axis_desc_style(text(16))
                .label_style(text(14))
                .x_label_formatter(&|x| per_turn_label(*x))
                .y_label_formatter(&|y| format!("{y:.0}"))
                .light_line_style(TRANSPARENT)
                .bold_line_style(GRID)
                .draw()?;
            let (x0, y0) = chart.backend_coord(&(x_lo, 105.0));
            let (x1, y1) = chart.backend_coord(&(x_hi, 0.0));
            place(
                &|x, y| chart.backend_coord(&(x, y)),
                Boxed { x0, y0, x1, y1 },
            )
        };
        // One marker per spot, of its first policy's kind (rebound's, where it is), then
        // the names.
        for p in placed.iter().rev() {
            if let Some((_, mark)) = p.names.first() {
                mark.draw(root, p.at)?;
            }
        }
        for p in &placed {
            if let Some(n) = p.number {
                root.draw(&Text::new(
                    n.to_string(),
                    (p.label.x0, p.label.y0),
                    left_top(bold(15)),
                ))?;
                continue;
            }
            for (i, (name, mark)) in p.names.iter().enumerate() {
                let style = if *mark == Mark::Rebound {
                    bold(15)
                } else {
                    text(15)
                };
                root.draw(&Text::new(
                    name.clone(),
                    (p.label.x0, p.label.y0 + 17 * i as i32),
                    left_top(style),
                ))?;
            }
        }
        if spots.is_empty() {
            let (w, h) = plot.dim_in_pixel();
            plot.draw(&Text::new(
                "No policy completed a turn: there is no amplification to plot.",
                (w as i32 / 2, h as i32 / 2 - 20),
                text(18).pos(Pos::new(HPos::Center, VPos::Center)),
            ))?;
            plot.draw(&Text::new(
                "The table's requests per agent compare them.",
                (w as i32 / 2, h as i32 / 2 + 6),
                text(18).pos(Pos::new(HPos::Center, VPos::Center)),
            ))?;
        }
        let key: Vec<String> = placed
            .iter()
            .filter_map(|p| {
                let names: Vec<&str> = p.names.iter().map(|(n, _)| n.as_str()).collect();
                Some(format!("{}: {}", p.number?, names.join(" · ")))
            })
            .collect();
        needed.set(scatter_legend(&foot, none, spots.is_empty(), &key)?);
        Ok(())
    }
}

/// Groups the spots whose markers would touch (drawn once, named together), then places
/// each group's names beside its marker where they overlap no other label or marker and
/// stay inside the plot: right, left, above or below; failing that, further away with a
/// line to the marker.
fn place_labels(
    spots: &[Spot],
    to_px: &dyn Fn(f64, f64) -> (i32, i32),
    bounds: Boxed,
) -> Vec<Placed> {
    const LINE: i32 = 17;
    const SIZE: u32 = 15;
    // Around every other marker a label keeps this clear, wider than high: a name level
    // with a neighbour's marker would read as the neighbour's.
    const CLEAR_X: i32 = 36;
    const CLEAR_Y: i32 = 14;
    // Between a label and its own marker.
    const GAP: i32 = 14;
    type Group = ((i32, i32), Vec<(String, Mark)>);
    let mut groups: Vec<Group> = Vec::new();
    for spot in spots {
        let at = to_px(spot.per_turn, spot.success);
        let entry = (policy_name(spot.policy), Mark::of(spot.policy));
        match groups
            .iter_mut()
            .find(|(g, _)| (g.0 - at.0).abs() <= 6 && (g.1 - at.1).abs() <= 6)
        {
            Some((_, names)) => names.push(entry),
            None => groups.push((at, vec![entry])),
        }
    }
    let markers: Vec<Boxed> = groups
        .iter()
        .map(|&((x, y), _)| Boxed {
            x0: x - CLEAR_X,
            y0: y - CLEAR_Y,
            x1: x + CLEAR_X,
            y1: y + CLEAR_Y,
        })
        .collect();
    let own_marker = |(x, y): (i32, i32)| Boxed {
        x0: x - 10,
        y0: y - 10,
        x1: x + 10,
        y1: y + 10,
    };
    let tight: Vec<Boxed> = groups.iter().map(|&(at, _)| own_marker(at)).collect();
    let centres: Vec<(i32, i32)> = groups.iter().map(|&(at, _)| at).collect();
    let mut labels: Vec<Boxed> = Vec::new();
    let mut numbered = 0;
    let mut placed = Vec::new();
    for (index, ((px, py), names)) in groups.into_iter().enumerate() {
        let w = names
            .iter()
            .map(|(n, _)| text_width(n, SIZE))
            .max()
            .unwrap_or(0);
        let h = LINE * names.len() as i32;
        let gap = GAP;
        let near = [
            (px + gap, py - LINE / 2),
            (px - gap - w, py - LINE / 2),
            (px - w / 2, py - gap - h),
            (px - w / 2, py + gap),
            (px - gap - w, py - h - 4),
            (px + gap, py - h - 4),
            (px - gap - w, py + 4),
            (px + gap, py + 4),
        ];
        let fits = |(x, y): (i32, i32), w: i32, h: i32, clear: &[Boxed]| {
            let b = Boxed {
                x0: x - 3,
                y0: y - 3,
                x1: x + w + 3,
                y1: y + h + 3,
            };
            b.x0 >= bounds.x0
                && b.x1 <= bounds.x1
                && b.y0 >= bounds.y0
                && b.y1 <= bounds.y1
                && !own_marker((px, py)).overlaps(&b)
                && !labels.iter().any(|t| t.overlaps(&b))
                && !clear
                    .iter()
                    .enumerate()
                    .any(|(i, m)| i != index && m.overlaps(&b))
        };
        let (at, size, number) = match near.iter().copied().find(|&at| fits(at, w, h, &markers)) {
            Some(at) => (at, (w, h), None),
            None => {
                // Too crowded to name in place: a number, named in the key.
                numbered += 1;
                let digits = numbered.to_string();
                let (w, h) = (text_width(&digits, SIZE), LINE);
                // Beside the marker, then further out in the same eight directions.
                let spots: Vec<(i32, i32)> = [16, 28, 40]
                    .into_iter()
                    .flat_map(|r| {
                        [
                            (px + r, py - h / 2),
                            (px - r - w, py - h / 2),
                            (px - w / 2, py - r - h),
                            (px - w / 2, py + r),
                            (px + r - 2, py - r + 2 - h),
                            (px + r - 2, py + r - 2),
                            (px - r + 2 - w, py - r + 2 - h),
                            (px - r + 2 - w, py + r - 2),
                        ]
                    })
                    .collect();
                // A number must be nearer its own marker than any other, or it would name
                // the neighbour.
                let nearest_is_own = |(x, y): (i32, i32)| {
                    let centre = (x + w / 2, y + h / 2);
                    let d2 = |(ax, ay): (i32, i32)| (ax - centre.0).pow(2) + (ay - centre.1).pow(2);
                    let own = d2((px, py));
                    centres
                        .iter()
                        .enumerate()
                        .all(|(i, &c)| i == index || d2(c) > own)
                };
                let at = spots
                    .iter()
                    .copied()
                    .find(|&at| fits(at, w, h, &tight) && nearest_is_own(at))
                    .or_else(|| spots.iter().copied().find(|&at| fits(at, w, h, &tight)))
                    .unwrap_or(spots[0]);
                (at, (w, h), Some(numbered))
            }
        };
        let label = Boxed {
            x0: at.0,
            y0: at.1,
            x1: at.0 + size.0,
            y1: at.1 + size.1,
        };
        labels.push(label);
        placed.push(Placed {
            at: (px, py),
            names,
            label,
            number,
        });
    }
    placed
}

/// Ticks at 1, 2 and 5 times the powers of ten between `lo` and `hi`.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut power = 10f64.powf(lo.log10().floor());
    while power <= hi {
        for step in [1.0, 2.0, 5.0] {
            let x = step * power;
            if (lo..=hi).contains(&x) {
                ticks.push(x);
            }
        }
        power *= 10.0;
    }
    ticks
}

/// A tick label: no decimals for whole numbers, one otherwise.
fn number(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

fn per_turn_label(x: f64) -> String {
    if x >= 10.0 || (x - x.round()).abs() < 1e-9 {
        format!("{x:.0}")
    } else if ((x * 10.0) - (x * 10.0).round()).abs() < 1e-9 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Draws the legend, the policies not plotted and the key of numbered spots, and returns
/// the height they took.
fn scatter_legend(
    area: &Area<'_>,
    none: &[String],
    all: bool,
    key: &[String],
) -> Result<u32, Box<dyn std::error::Error + Send + Sync>> {
    let mut x = 90;
    let y = 22;
    for mark in [
        Mark::Rebound,
        Mark::ReboundWithoutBudget,
        Mark::Peer,
        Mark::BudgetedPeer,
    ] {
        mark.draw(area, (x, y + 8))?;
        area.draw(&Text::new(mark.label(), (x + 16, y), left_top(text(15))))?;
        x += 16 + text_width(mark.label(), 15) + 30;
    }
    let mut lines: Vec<String> = key.to_vec();
    if all {
        lines.push("No policy completed a turn.".to_owned());
    } else if !none.is_empty() {
        lines.push("No turn completed (not plotted): ".to_owned());
    }
    for (i, name) in none.iter().enumerate().filter(|_| !all) {
        let piece = if i + 1 < none.len() {
            format!("{name}, ")
        } else {
            name.clone()
        };
        let last = lines.len() - 1;
        if text_width(&lines[last], 14) + text_width(&piece, 14) > 880 {
            lines.push(String::new());
        }
        let last = lines.len() - 1;
        lines[last].push_str(&piece);
    }
    for (i, line) in lines.iter().enumerate() {
        area.draw(&Text::new(
            line.clone(),
            (90, y + 30 + 18 * i as i32),
            left_top(text(14)),
        ))?;
    }
    Ok(u32::try_from(y + 30 + 18 * lines.len() as i32 + 12).unwrap_or(0))
}

/// Writes, for every model of `report`, `MODEL-requests-per-second.svg`
/// ([`requests_per_second_svg`]) and `MODEL-success-vs-amplification.svg`
/// ([`success_vs_amplification_svg`]) into `dir` (created if missing), and returns the
/// files written, in that order.
///
/// # Errors
///
/// [`ChartError::Write`] when `dir` or a file cannot be written.
pub fn write_experiment_charts(
    report: &Report,
    timelines: &[Timeline],
    dir: &Path,
) -> Result<Vec<PathBuf>, ChartError> {
    let mut written = Vec::new();
    for model in &report.config.models {
        let svg = requests_per_second_svg(report, timelines, &model.name)?;
        written.push(write(
            dir,
            &format!("{}-requests-per-second.svg", model.name),
            &svg,
        )?);
        let svg = success_vs_amplification_svg(report, &model.name)?;
        written.push(write(
            dir,
            &format!("{}-success-vs-amplification.svg", model.name),
            &svg,
        )?);
    }
    Ok(written)
}

fn write(dir: &Path, name: &str, svg: &str) -> Result<PathBuf, ChartError> {
    let path = dir.join(name);
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, svg))
        .map_err(|source| ChartError::Write {
            path: path.clone(),
            source,
        })?;
    Ok(path)
}

fn scenario_name(stats: &Stats) -> &str {
    if stats.scenario.is_empty() {
        "scenario"
    } else {
        &stats.scenario
    }
}

fn runs_line(stats: &Stats) -> String {
    let done = stats.per_run.iter().filter(|r| r.succeeded).count();
    let runs = stats.per_run.len();
    let seeds = match (stats.per_run.first(), stats.per_run.last()) {
        (Some(a), Some(b)) if a.seed != b.seed => format!("seeds {}–{}", a.seed, b.seed),
        (Some(a), _) => format!("seed {}", a.seed),
        _ => "no runs".to_owned(),
    };
    format!(
        "{runs} runs ({seeds}): {done} finished ({:.1} %), {} failed",
        if runs == 0 {
            0.0
        } else {
            done as f64 * 100.0 / runs as f64
        },
        runs - done
    )
}

/// The distribution of the time to completion of [`run_many`](rebound_sim::run_many)'s runs: the
/// share of all runs finished by each virtual time (so the line tops out at the success
/// rate), with the median and 99th percentile of the finished runs marked.
///
/// # Errors
///
/// [`ChartError::Draw`] on a bug.
pub fn time_to_completion_svg(stats: &Stats) -> Result<String, ChartError> {
    let title = format!("{}: time to completion", scenario_name(stats));
    let runs = stats.per_run.len();
    let mut done: Vec<u64> = stats
        .per_run
        .iter()
        .filter(|r| r.succeeded)
        .map(|r| r.elapsed_ms)
        .collect();
    done.sort_unstable();
    let last = done.last().copied().unwrap_or(0) as f64 / 1_000.0;
    let x_max = nice_ceil((last * 1.05).max(1.0));
    let size = (1000u32, 620u32);
    render(&title, size, |root| {
        root.draw(&Text::new(title.clone(), (20, 14), left_top(bold(26))))?;
        root.draw(&Text::new(runs_line(stats), (20, 50), left_top(text(16))))?;
        let (_, plot) = root.split_vertically(80);
        let mut chart = ChartBuilder::on(&plot)
            .margin(10)
            .margin_right(40)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_max, 0f64..100f64)?;
        chart
            .configure_mesh()
            .x_desc("virtual time from the run's start to its answer (s)")
            .y_desc("runs finished by then (% of all runs)")
            .axis_desc_style(text(16))
            .label_style(text(14))
            .x_label_formatter(&|x| number(*x))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .light_line_style(TRANSPARENT)
            .bold_line_style(GRID)
            .draw()?;
        if runs > 0 && !done.is_empty() {
            let share = |i: usize| i as f64 * 100.0 / runs as f64;
            let mut points = vec![(0.0, 0.0)];
            for (i, &ms) in done.iter().enumerate() {
                let t = ms as f64 / 1_000.0;
                points.push((t, share(i)));
                points.push((t, share(i + 1)));
            }
            points.push((x_max, share(done.len())));
            chart
                .draw_series(LineSeries::new(points, BLACK.stroke_width(3)))?
                .label("runs finished (cumulative)")
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], BLACK.stroke_width(3))
                });
            for (p, colour, dash) in [(50.0, REBOUND, 8), (99.0, BUDGETED, 3)] {
                let at = percentile(&done, p) as f64 / 1_000.0;
                let name = format!("p{p:.0} of finished runs: {at:.1} s");
                chart
                    .draw_series(DashedLineSeries::new(
                        vec![(at, 0.0), (at, 100.0)],
                        dash,
                        4,
                        colour.stroke_width(2),
                    ))?
                    .label(name)
                    .legend(move |(x, y)| {
                        DashedPathElement::new(
                            vec![(x, y), (x + 24, y)],
                            dash,
                            4,
                            colour.stroke_width(2),
                        )
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .margin(16)
                .label_font(text(15))
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .draw()?;
        } else {
            let (w, h) = chart.plotting_area().dim_in_pixel();
            let (bx, by) = chart.plotting_area().get_base_pixel();
            root.draw(&Text::new(
                "No run finished.",
                (bx + w as i32 / 2, by + h as i32 / 2),
                text(18).pos(Pos::new(HPos::Center, VPos::Center)),
            ))?;
        }
        Ok(())
    })
}

/// The histogram of provider requests (attempts) per run of
/// [`run_many`](rebound_sim::run_many), finished and failed runs stacked.
///
/// # Errors
///
/// [`ChartError::Draw`] on a bug.
pub fn attempts_svg(stats: &Stats) -> Result<String, ChartError> {
    let title = format!("{}: provider requests per run", scenario_name(stats));
    let most = stats.per_run.iter().map(|r| r.requests).max().unwrap_or(1);
    let mut finished = vec![0u32; most as usize + 1];
    let mut failed = vec![0u32; most as usize + 1];
    for r in &stats.per_run {
        let counts = if r.succeeded {
            &mut finished
        } else {
            &mut failed
        };
        counts[r.requests as usize] += 1;
    }
    let tallest = finished
        .iter()
        .zip(&failed)
        .map(|(a, b)| a + b)
        .max()
        .unwrap_or(0);
    let y_max = nice_ceil((f64::from(tallest) * 1.1).max(1.0));
    let size = (1000u32, 620u32);
    let x_min = if finished[0] + failed[0] > 0 {
        -0.5
    } else {
        0.5
    };
    let x_max = f64::from(most) + 0.5;
    render(&title, size, |root| {
        root.draw(&Text::new(title.clone(), (20, 14), left_top(bold(26))))?;
        root.draw(&Text::new(runs_line(stats), (20, 50), left_top(text(16))))?;
        let (_, plot) = root.split_vertically(80);
        let mut chart = ChartBuilder::on(&plot)
            .margin(10)
            .margin_right(40)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(x_min..x_max, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc("provider requests in the run (first attempts and retries)")
            .y_desc("runs")
            .axis_desc_style(text(16))
            .label_style(text(14))
            .x_labels((most as usize + 1).min(20))
            .x_label_formatter(&|x| {
                if (x.fract()).abs() < 1e-9 {
                    format!("{x:.0}")
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| format!("{y:.0}"))
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(GRID)
            .draw()?;
        let bar = |n: usize, from: u32, to: u32| {
            [
                (n as f64 - 0.35, f64::from(from)),
                (n as f64 + 0.35, f64::from(to)),
            ]
        };
        chart
            .draw_series(
                (0..=most as usize)
                    .filter(|&n| finished[n] > 0)
                    .map(|n| Rectangle::new(bar(n, 0, finished[n]), RGBColor(40, 40, 40).filled())),
            )?
            .label("finished")
            .legend(|(x, y)| {
                Rectangle::new([(x, y - 6), (x + 14, y + 6)], RGBColor(40, 40, 40).filled())
            });
        chart
            .draw_series(
                (0..=most as usize)
                    .filter(|&n| failed[n] > 0)
                    .flat_map(|n| {
                        let b = bar(n, finished[n], finished[n] + failed[n]);
                        [
                            Rectangle::new(b, FAILED.filled()),
                            Rectangle::new(b, BLACK.stroke_width(1)),
                        ]
                    }),
            )?
            .label("failed")
            .legend(|(x, y)| {
                EmptyElement::at((x, y))
                    + Rectangle::new([(-0, -6), (14, 6)], FAILED.filled())
                    + Rectangle::new([(0, -6), (14, 6)], BLACK.stroke_width(1))
            });
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .margin(16)
            .legend_area_size(26)
            .label_font(text(15))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })
}

/// Writes `SCENARIO-time-to-completion.svg` ([`time_to_completion_svg`]) and
/// `SCENARIO-attempts.svg` ([`attempts_svg`]) into `dir` (created if missing) and returns
/// the files written.
///
/// # Errors
///
/// [`ChartError::Write`] when `dir` or a file cannot be written.
pub fn write_scenario_charts(stats: &Stats, dir: &Path) -> Result<Vec<PathBuf>, ChartError> {
    let name = scenario_name(stats).replace(['/', '\\', ' '], "-");
    Ok(vec![
        write(
            dir,
            &format!("{name}-time-to-completion.svg"),
            &time_to_completion_svg(stats)?,
        )?,
        write(dir, &format!("{name}-attempts.svg"), &attempts_svg(stats)?)?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::{run_experiment_with_timelines, ExperimentConfig};
    use rebound_sim::{run_many, Scenario, SimConfig};

    /// A fresh directory under the system's temporary directory, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir =
                std::env::temp_dir().join(format!("rebound-charts-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn experiment(seed: u64) -> (Report, Vec<Timeline>) {
        let config = ExperimentConfig {
            seed,
            agents: 40,
            ..ExperimentConfig::default()
        };
        run_experiment_with_timelines(&config).expect("the experiment runs")
    }

    fn read_all(paths: &[PathBuf]) -> Vec<(String, Vec<u8>)> {
        paths
            .iter()
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(p).expect("the chart was written"))
            })
            .collect()
    }

    #[test]
    fn the_same_seed_writes_byte_identical_experiment_charts() {
        let (a, b) = (TempDir::new("same-a"), TempDir::new("same-b"));
        let (report, timelines) = experiment(3);
        let first = write_experiment_charts(&report, &timelines, &a.0).unwrap();
        let (report, timelines) = experiment(3);
        let second = write_experiment_charts(&report, &timelines, &b.0).unwrap();
        assert_eq!(read_all(&first), read_all(&second));
        // And the charts show the runs: another seed draws other lines.
        let (report, timelines) = experiment(4);
        let other = TempDir::new("same-c");
        let third = write_experiment_charts(&report, &timelines, &other.0).unwrap();
        assert_ne!(read_all(&first), read_all(&third));
    }

    #[test]
    fn every_model_gets_both_charts_with_title_axes_and_legend() {
        let dir = TempDir::new("labels");
        let (report, timelines) = experiment(1);
        let written = write_experiment_charts(&report, &timelines, &dir.0).unwrap();
        assert_eq!(written.len(), 2 * report.config.models.len());
        for model in &report.config.models {
            let read = |suffix: &str| {
                std::fs::read_to_string(dir.0.join(format!("{}-{suffix}.svg", model.name)))
                    .unwrap_or_else(|e| panic!("{} {suffix}: {e}", model.name))
            };
            let rates = read("requests-per-second");
            for needle in [
                format!("{}: requests per second, by policy", model.name),
                "virtual time (s)".to_owned(),
                "requests / s".to_owned(),
                "How to read".to_owned(),
                "rebound, no budget".to_owned(),
                "codex-cli".to_owned(),
            ] {
                assert!(rates.contains(&needle), "{}: no {needle:?}", model.name);
            }
            assert!(rates.starts_with("<svg") && rates.trim_end().ends_with("</svg>"));
            let scatter = read("success-vs-amplification");
            for needle in [
                format!(
                    "{}: success against requests per completed turn",
                    model.name
                ),
                "requests per completed turn".to_owned(),
                "success (% of turns completed)".to_owned(),
                "a peer with a retry budget".to_owned(),
            ] {
                assert!(scatter.contains(&needle), "{}: no {needle:?}", model.name);
            }
        }
    }

    #[test]
    fn the_outage_window_is_shaded_and_a_model_without_one_says_so() {
        let (report, timelines) = experiment(1);
        // Gemini CLI's last retries (30 s apart) carry the brownout's axis past its window;
        // nothing carries the total outage's that far.
        let brownout = requests_per_second_svg(&report, &timelines, "brownout").unwrap();
        assert!(brownout.contains("outage window, 0–120 s"));
        let total = requests_per_second_svg(&report, &timelines, "total-outage").unwrap();
        assert!(total.contains("outage 0–600 s (runs past the edge)"));
        let shade = format!("fill=\"#{:02X}{:02X}{:02X}\"", SHADE.0, SHADE.1, SHADE.2);
        assert!(brownout.contains(&shade), "no shaded window");
        let blip = requests_per_second_svg(&report, &timelines, "blip").unwrap();
        assert!(blip.contains("no outage window"));
        assert!(!blip.contains(&shade));
        assert!(matches!(
            requests_per_second_svg(&report, &timelines, "no-such-model"),
            Err(ChartError::UnknownModel { .. })
        ));
    }

    #[test]
    fn policies_that_completed_nothing_are_listed_not_plotted() {
        let (report, _) = experiment(1);
        let total = success_vs_amplification_svg(&report, "total-outage").unwrap();
        assert!(total.contains("No policy completed a turn"));
        let rate_limit = success_vs_amplification_svg(&report, "rate-limit").unwrap();
        let listed = rate_limit
            .lines()
            .find(|l| l.contains("No turn completed (not plotted)"))
            .expect("the list of policies that completed nothing");
        assert!(listed.contains("codex-cli"), "{listed}");
    }

    #[test]
    fn scenario_charts_are_deterministic_and_labelled() {
        let brownout = Scenario::builtin("brownout").unwrap();
        let stats = run_many(&brownout, &SimConfig::default(), 0, 100);
        let (a, b) = (TempDir::new("scenario-a"), TempDir::new("scenario-b"));
        let first = write_scenario_charts(&stats, &a.0).unwrap();
        let again = run_many(&brownout, &SimConfig::default(), 0, 100);
        let second = write_scenario_charts(&again, &b.0).unwrap();
        assert_eq!(read_all(&first), read_all(&second));
        let names: Vec<String> = read_all(&first).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            ["brownout-time-to-completion.svg", "brownout-attempts.svg"]
        );
        let ttc = std::fs::read_to_string(&first[0]).unwrap();
        for needle in [
            "brownout: time to completion",
            "virtual time from the run",
            "runs finished by then (% of all runs)",
            "p50 of finished runs",
            "p99 of finished runs",
            "100 runs (seeds 0–99)",
        ] {
            assert!(ttc.contains(needle), "no {needle:?}");
        }
        let attempts = std::fs::read_to_string(&first[1]).unwrap();
        for needle in [
            "brownout: provider requests per run",
            "provider requests in the run",
            // plotters writes a text element's content on a line of its own.
            "\nruns\n",
            "\nfinished\n",
            "\nfailed\n",
        ] {
            assert!(attempts.contains(needle), "no {needle:?}");
        }
    }

    #[test]
    fn runs_are_split_into_finished_and_failed_as_stats_counts_them() {
        let brownout = Scenario::builtin("brownout").unwrap();
        let stats = run_many(&brownout, &SimConfig::default(), 0, 100);
        let finished = stats.per_run.iter().filter(|r| r.succeeded).count();
        assert_eq!(finished, stats.succeeded as usize);
        assert!(runs_line(&stats).contains(&format!("{finished} finished")));
    }

    #[test]
    fn labels_never_overlap_and_crowded_spots_get_numbers() {
        use crate::compare::Peer;
        let spot = |policy, per_turn, success| Spot {
            policy,
            per_turn,
            success,
        };
        // Pixels are the values themselves; four spots within a few pixels of each other,
        // one alone, and two on the same pixel.
        let spots = [
            spot(Policy::Rebound, 500.0, 100.0),
            spot(Policy::ReboundWithoutBudget, 500.0, 100.0),
            spot(Policy::Peer(Peer::CodexCli), 501.0, 112.0),
            spot(Policy::Peer(Peer::GrpcThrottled), 497.0, 121.0),
            spot(Policy::Peer(Peer::NoRetries), 503.0, 130.0),
            spot(Policy::Peer(Peer::AnthropicPython), 200.0, 400.0),
        ];
        let bounds = Boxed {
            x0: 0,
            y0: 0,
            x1: 1_000,
            y1: 600,
        };
        let placed = place_labels(&spots, &|x, y| (x as i32, y as i32), bounds);
        assert_eq!(placed.len(), 5, "the two on one pixel are one spot");
        assert_eq!(
            placed[0]
                .names
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
            ["rebound", "rebound, no budget"]
        );
        assert!(
            placed.iter().any(|p| p.number.is_some()),
            "the crowd is numbered"
        );
        let alone = placed.iter().find(|p| p.at == (200, 400)).unwrap();
        assert_eq!(alone.number, None, "a spot with room is named in place");
        for (i, a) in placed.iter().enumerate() {
            for b in &placed[i + 1..] {
                assert!(!a.label.overlaps(&b.label), "labels overlap");
            }
        }
    }

    #[test]
    fn nice_bounds_and_ticks() {
        assert_eq!(nice_ceil(503.0), 600.0);
        assert_eq!(nice_ceil(41.0), 50.0);
        assert_eq!(nice_ceil(10.0), 10.0);
        assert_eq!(nice_ceil(0.0), 1.0);
        assert_eq!(
            log_ticks(1.0, 200.0),
            [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]
        );
        assert_eq!(per_turn_label(2.0), "2");
        assert_eq!(per_turn_label(1.5), "1.5");
        assert_eq!(per_turn_label(1.25), "1.25");
    }
}
