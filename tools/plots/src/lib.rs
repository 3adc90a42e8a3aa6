//! Draws the figures of docs/performance.md from the scale harness's JSON
//! (`placement-scheduler/examples/scale --json <path>`, kept in docs/figures/data/):
//!
//! - `throughput.svg`: 1,000 Placements × 1,000 clusters, ours against upstream: wall time until
//!   every Placement is decided, until the controller stops writing, and its CPU;
//! - `reaction.svg`: p50 and p99 from a score write to the moved decision, per shape and run;
//! - `memory.svg`: the controller's peak RSS per shape.
//!
//! Every figure carries the date, commit and command of the run its figures came from. The
//! output depends on nothing but the JSON (SVG text, plotters' own text-size estimate, no
//! fonts), so the committed SVGs can be checked byte for byte against a fresh render.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::Deserialize;

/// The format the harness writes (its `data.rs`); other versions are refused.
pub const FORMAT: &str = "ocm-placement/scale-run/v1";

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 560;
const OURS: RGBColor = RGBColor(31, 119, 180);
const OURS_LIGHT: RGBColor = RGBColor(120, 170, 215);
const UPSTREAM: RGBColor = RGBColor(230, 110, 0);
const UPSTREAM_LIGHT: RGBColor = RGBColor(250, 185, 120);
const GREY: RGBColor = RGBColor(90, 90, 90);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a scale run's JSON ({FORMAT}): {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: format {found:?}; this tool reads {FORMAT:?} (what `scale --json` writes)", path.display())]
    Format { path: PathBuf, found: String },
    #[error("{}: {what}", path.display())]
    Missing { path: PathBuf, what: String },
    #[error("drawing {figure}: {message}")]
    Draw {
        figure: &'static str,
        message: String,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Which controller a row measured.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Controller {
    Ours,
    Upstream,
}

/// One harness run: its provenance and its figures (the fields the figures use; the harness
/// writes more, which are ignored here).
#[derive(Debug, Deserialize)]
pub struct Run {
    pub format: String,
    pub date: String,
    pub commit: String,
    pub command: String,
    #[serde(default)]
    pub upstream: Option<String>,
    #[serde(default)]
    pub throughput: Vec<Throughput>,
    #[serde(default)]
    pub moves: Vec<Moves>,
}

#[derive(Debug, Deserialize)]
pub struct Throughput {
    pub controller: Controller,
    pub placements: u64,
    pub clusters: u64,
    pub decided_s: Option<f64>,
    #[serde(default)]
    pub settled_s: Option<f64>,
    #[serde(default)]
    pub controller_cpu_s: Option<f64>,
    #[serde(default)]
    pub peak_rss_mb: Option<f64>,
    #[serde(default)]
    pub writes_per_placement: Option<f64>,
}

#[derive(Debug, Deserialize)]
pub struct Moves {
    pub controller: Controller,
    pub shape: String,
    pub clusters: u64,
    pub placements: u64,
    #[serde(default)]
    pub p50_ms: Option<f64>,
    #[serde(default)]
    pub p99_ms: Option<f64>,
}

/// A run read from a file, with the file's path for messages.
pub struct Source {
    pub path: PathBuf,
    pub run: Run,
}

impl Source {
    /// Reads and checks one JSON file.
    pub fn read(path: &Path) -> Result<Source, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        Source::parse(path, &text)
    }

    /// Parses `text` (read from `path`, which names it in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Source, Error> {
        let run: Run = serde_json::from_str(text).map_err(|source| Error::Parse {
            path: path.to_owned(),
            source,
        })?;
        if run.format != FORMAT {
            return Err(Error::Format {
                path: path.to_owned(),
                found: run.format,
            });
        }
        for (field, value) in [
            ("date", &run.date),
            ("commit", &run.commit),
            ("command", &run.command),
        ] {
            if value.trim().is_empty() {
                return Err(Error::Missing {
                    path: path.to_owned(),
                    what: format!("empty {field:?}: every figure names the run it came from"),
                });
            }
        }
        Ok(Source {
            path: path.to_owned(),
            run,
        })
    }

    fn missing(&self, what: impl Into<String>) -> Error {
        Error::Missing {
            path: self.path.clone(),
            what: what.into(),
        }
    }

    fn throughput(
        &self,
        controller: Controller,
        placements: u64,
        clusters: u64,
    ) -> Option<&Throughput> {
        self.run.throughput.iter().find(|t| {
            t.controller == controller && t.placements == placements && t.clusters == clusters
        })
    }

    /// "2026-11-26, commit 0a34bf6" and the command.
    fn provenance(&self) -> (String, String) {
        let r = &self.run;
        let mut first = format!("{}, commit {}", r.date, r.commit);
        if let Some(u) = &r.upstream {
            let _ = write!(first, "; upstream: {u}");
        }
        (first, format!("$ {}", r.command))
    }
}

/// A rendered figure: its file name under docs/figures/ and its SVG text.
pub struct Figure {
    pub name: &'static str,
    pub svg: String,
}

/// The data files each figure reads, relative to the data folder.
pub const THROUGHPUT_1000: &str = "throughput-1000x1000.json";
pub const THROUGHPUT_10000: &str = "throughput-10000x1000.json";
pub const REACT_RUNS: [&str; 2] = ["react-run1.json", "react-run2.json"];

/// Renders every figure from the JSON files in `data_dir`.
pub fn render_all(data_dir: &Path) -> Result<Vec<Figure>, Error> {
    let read = |name: &str| Source::read(&data_dir.join(name));
    let t1000 = read(THROUGHPUT_1000)?;
    let t10000 = read(THROUGHPUT_10000)?;
    let react = [read(REACT_RUNS[0])?, read(REACT_RUNS[1])?];
    Ok(vec![
        Figure {
            name: "throughput.svg",
            svg: throughput(&t1000)?,
        },
        Figure {
            name: "reaction.svg",
            svg: reaction(&react)?,
        },
        Figure {
            name: "memory.svg",
            svg: memory(&[&t1000, &t10000])?,
        },
    ])
}

/// Writes the figures into `out_dir`.
pub fn write_all(figures: &[Figure], out_dir: &Path) -> Result<(), Error> {
    for f in figures {
        let path = out_dir.join(f.name);
        std::fs::write(&path, &f.svg).map_err(|source| Error::Write { path, source })?;
    }
    Ok(())
}

/// `12345` -> "12,345".
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// `1234.5` -> "1,235"; below 100, one decimal ("13.4") unless whole ("40").
pub fn number(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.round() {
        let s = count(v.round().abs() as u64);
        if v < 0.0 { format!("-{s}") } else { s }
    } else {
        format!("{v:.1}")
    }
}

fn draw_err(figure: &'static str) -> impl Fn(DrawingAreaErrorKind<std::io::Error>) -> Error {
    move |e| Error::Draw {
        figure,
        message: e.to_string(),
    }
}

/// One bar of a grouped bar chart.
struct Bar {
    value: f64,
    label: String,
    /// A whisker up to this value (p99 over a p50 bar), with its own label.
    whisker: Option<(f64, String)>,
}

/// A grouped bar chart's contents.
struct Bars<'a> {
    figure: &'static str,
    title: String,
    subtitle: String,
    y_desc: &'a str,
    log: bool,
    groups: Vec<(String, Vec<Option<Bar>>)>,
    /// Legend: name and colour, one per bar position in a group.
    legend: Vec<(String, RGBColor)>,
    /// What stands where a bar is missing.
    missing: &'a str,
    sources: Vec<&'a Source>,
}

fn render(b: &Bars<'_>) -> Result<String, Error> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, b)?;
        root.present().map_err(draw_err(b.figure))?;
    }
    svg.push('\n');
    Ok(svg)
}

/// The axes, bars, group labels, bar labels and legend of one chart: a macro because the log and
/// the linear charts are different types in plotters.
macro_rules! chart_body {
    ($chart:ident, $floor:expr, $ytick:expr, $root:ident, $b:ident, $err:ident, $bar_x:ident, $group_labels:ident, $values:ident) => {{
        $chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc($b.y_desc)
            .y_label_formatter(&$ytick)
            .axis_desc_style(("sans-serif", 14))
            .label_style(("sans-serif", 12))
            .light_line_style(WHITE.mix(0.0))
            .bold_line_style(BLACK.mix(0.12))
            .draw()
            .map_err(&$err)?;
        for (i, (name, color)) in $b.legend.iter().enumerate() {
            let rects: Vec<Rectangle<(f64, f64)>> = $b
                .groups
                .iter()
                .enumerate()
                .filter_map(|(g, (_, bars))| {
                    let bar = bars.get(i)?.as_ref()?;
                    let (x0, x1) = $bar_x(g, i);
                    Some(Rectangle::new(
                        [(x0, $floor), (x1, bar.value)],
                        color.filled(),
                    ))
                })
                .collect();
            let c = *color;
            $chart
                .draw_series(rects)
                .map_err(&$err)?
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
        }
        for (g, (label, bars)) in $b.groups.iter().enumerate() {
            let (x, y) = $chart.backend_coord(&(g as f64 + 0.5, $floor));
            $root
                .draw(&Text::new(
                    label.clone(),
                    (x, y + 10),
                    $group_labels.pos(Pos::new(HPos::Center, VPos::Top)),
                ))
                .map_err(&$err)?;
            for (i, bar) in bars.iter().enumerate() {
                let (x0, x1) = $bar_x(g, i);
                let mid = (x0 + x1) / 2.0;
                let Some(bar) = bar else {
                    let (px, py) = $chart.backend_coord(&(mid, $floor));
                    $root
                        .draw(&Text::new(
                            $b.missing.to_owned(),
                            (px, py - 6),
                            ("sans-serif", 12)
                                .into_font()
                                .color(&GREY)
                                .pos(Pos::new(HPos::Center, VPos::Bottom)),
                        ))
                        .map_err(&$err)?;
                    continue;
                };
                let (px, top) = $chart.backend_coord(&(mid, bar.value));
                if let Some((high, text)) = &bar.whisker {
                    let (_, wy) = $chart.backend_coord(&(mid, *high));
                    let (wx0, _) = $chart.backend_coord(&(x0 + (x1 - x0) * 0.3, *high));
                    let (wx1, _) = $chart.backend_coord(&(x1 - (x1 - x0) * 0.3, *high));
                    let line = BLACK.stroke_width(1);
                    $root
                        .draw(&PathElement::new(vec![(px, top), (px, wy)], line))
                        .map_err(&$err)?;
                    $root
                        .draw(&PathElement::new(vec![(wx0, wy), (wx1, wy)], line))
                        .map_err(&$err)?;
                    $root
                        .draw(&Text::new(
                            text.clone(),
                            (px, wy - 3),
                            $values.pos(Pos::new(HPos::Center, VPos::Bottom)),
                        ))
                        .map_err(&$err)?;
                    // The bar's own value inside its top.
                    $root
                        .draw(&Text::new(
                            bar.label.clone(),
                            (px, top + 4),
                            ("sans-serif", 12)
                                .into_font()
                                .color(&WHITE)
                                .pos(Pos::new(HPos::Center, VPos::Top)),
                        ))
                        .map_err(&$err)?;
                } else {
                    $root
                        .draw(&Text::new(
                            bar.label.clone(),
                            (px, top - 4),
                            $values.pos(Pos::new(HPos::Center, VPos::Bottom)),
                        ))
                        .map_err(&$err)?;
                }
            }
        }
        $chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(&$err)?;
    }};
}

fn draw(root: &DrawingArea<SVGBackend<'_>, Shift>, b: &Bars<'_>) -> Result<(), Error> {
    let err = draw_err(b.figure);
    root.fill(&WHITE).map_err(&err)?;
    let title = ("sans-serif", 20).into_font().color(&BLACK);
    let small = ("sans-serif", 13).into_font().color(&GREY);
    root.draw_text(&b.title, &title, (20, 12)).map_err(&err)?;
    root.draw_text(&b.subtitle, &small, (20, 40))
        .map_err(&err)?;

    let footer_lines = 2 * provenance_lines(&b.sources) as u32;
    let footer = 16 * footer_lines + 12;
    let (upper, lower) = root.split_vertically(HEIGHT - footer);
    let (_, plot) = upper.split_vertically(62);

    let max = b
        .groups
        .iter()
        .flat_map(|(_, bars)| bars.iter().flatten())
        .map(|bar| {
            bar.whisker
                .as_ref()
                .map_or(bar.value, |w| w.0.max(bar.value))
        })
        .fold(0.0_f64, f64::max);
    let n = b.groups.len() as f64;
    let group_labels = ("sans-serif", 14).into_font().color(&BLACK);
    let values = ("sans-serif", 12).into_font().color(&BLACK);
    let slots = b.legend.len().max(1) as f64;
    // Bar i of a group spans this much of the group's unit width.
    let inner = 0.8 / slots;
    let bar_x = |g: usize, i: usize| {
        let x0 = g as f64 + 0.1 + inner * i as f64;
        (x0 + inner * 0.08, x0 + inner * 0.92)
    };
    if b.log {
        // Decades from 1 to the first power of ten above the largest value, with headroom.
        let top = 10f64.powf((max * 2.0).log10().ceil()).max(10.0);
        let mut chart = ChartBuilder::on(&plot)
            .margin_left(20)
            .margin_right(30)
            .margin_top(10)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..n, (1f64..top).log_scale())
            .map_err(&err)?;
        let tick = |v: &f64| number(*v);
        chart_body!(chart, 1.0, tick, root, b, err, bar_x, group_labels, values);
    } else {
        let top = nice_top(max * 1.18);
        let mut chart = ChartBuilder::on(&plot)
            .margin_left(20)
            .margin_right(30)
            .margin_top(10)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..n, 0f64..top)
            .map_err(&err)?;
        let tick = |v: &f64| number(*v);
        chart_body!(chart, 0.0, tick, root, b, err, bar_x, group_labels, values);
    }

    draw_provenance(&lower, &b.sources, &err)
}

/// The provenance lines under the chart: what was measured when, and the command.
fn draw_provenance(
    lower: &DrawingArea<SVGBackend<'_>, Shift>,
    sources: &[&Source],
    err: &impl Fn(DrawingAreaErrorKind<std::io::Error>) -> Error,
) -> Result<(), Error> {
    let prov = ("sans-serif", 12).into_font().color(&GREY);
    let cmd = ("monospace", 11).into_font().color(&GREY);
    // Runs of the same commit and command share their lines.
    let mut lines: Vec<(usize, String, String)> = Vec::new();
    for s in sources {
        let (first, command) = s.provenance();
        match lines
            .iter_mut()
            .find(|(_, f, c)| *f == first && *c == command)
        {
            Some(line) => line.0 += 1,
            None => lines.push((1, first, command)),
        }
    }
    let mut y = 4;
    for (runs, first, command) in &lines {
        let what = match runs {
            1 => "Measured".to_owned(),
            n => format!("Measured in {n} runs,"),
        };
        lower
            .draw_text(&format!("{what} {first}"), &prov, (20, y))
            .map_err(err)?;
        lower.draw_text(command, &cmd, (20, y + 16)).map_err(err)?;
        y += 32;
    }
    Ok(())
}

/// How many distinct (provenance, command) pairs the sources have.
fn provenance_lines(sources: &[&Source]) -> usize {
    let mut seen: Vec<(String, String)> = Vec::new();
    for s in sources {
        let p = s.provenance();
        if !seen.contains(&p) {
            seen.push(p);
        }
    }
    seen.len()
}

/// The smallest of 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k at or above `v`.
fn nice_top(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let k = 10f64.powf(v.log10().floor());
    [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .into_iter()
        .map(|m| m * k)
        .find(|t| *t >= v)
        .unwrap_or(10.0 * k)
}

fn seconds(v: f64) -> String {
    format!("{} s", number(v))
}

/// Throughput at 1,000 × 1,000: wall to all decided, to settled, controller CPU.
pub fn throughput(src: &Source) -> Result<String, Error> {
    let (p, c) = (1000, 1000);
    let ours = src
        .throughput(Controller::Ours, p, c)
        .ok_or_else(|| src.missing("no throughput row for ours at 1000 x 1000"))?;
    let up = src
        .throughput(Controller::Upstream, p, c)
        .ok_or_else(|| src.missing("no throughput row for upstream at 1000 x 1000"))?;
    let bar = |v: Option<f64>| {
        v.map(|value| Bar {
            value,
            label: seconds(value),
            whisker: None,
        })
    };
    type Measure = fn(&Throughput) -> Option<f64>;
    let measures: [(&str, Measure); 3] = [
        ("first Placement → all decided", |t| t.decided_s),
        ("→ settled (no more writes)", |t| t.settled_s),
        ("controller CPU", |t| t.controller_cpu_s),
    ];
    let groups = measures
        .iter()
        .map(|(name, f)| ((*name).to_owned(), vec![bar(f(ours)), bar(f(up))]))
        .collect();
    let writes = |t: &Throughput| {
        t.writes_per_placement
            .map_or("–".to_owned(), |w| format!("{w:.2}"))
    };
    render(&Bars {
        figure: "throughput.svg",
        title: "Throughput: 1,000 Placements × 1,000 clusters, ours and upstream".into(),
        subtitle: format!(
            "upstream's benchmark shape (numberOfClusters 10, Exact, AddOn + ResourceAllocatableCPU + Balance); seconds, lower is better; writes per Placement: ours {}, upstream {}",
            writes(ours),
            writes(up)
        ),
        y_desc: "seconds",
        log: false,
        groups,
        legend: vec![("ours".into(), OURS), ("upstream OCM".into(), UPSTREAM)],
        missing: "not measured",
        sources: vec![src],
    })
}

/// Moves: p50 bars and p99 whiskers per shape, ours and upstream, one bar per run.
pub fn reaction(runs: &[Source; 2]) -> Result<String, Error> {
    // Shapes in the order of the first run's file.
    let mut shapes: Vec<(u64, u64)> = Vec::new();
    for m in runs[0].run.moves.iter().filter(|m| m.shape == "moves") {
        if !shapes.contains(&(m.clusters, m.placements)) {
            shapes.push((m.clusters, m.placements));
        }
    }
    if shapes.is_empty() {
        return Err(runs[0].missing("no moves rows"));
    }
    // In the legend's order.
    let slots = [
        (Controller::Ours, 0),
        (Controller::Ours, 1),
        (Controller::Upstream, 0),
        (Controller::Upstream, 1),
    ];
    let mut groups = Vec::new();
    for &(c, p) in &shapes {
        let mut bars = Vec::new();
        for &(ctl, run) in &slots {
            let src = &runs[run];
            let row = src.run.moves.iter().find(|m| {
                m.shape == "moves" && m.controller == ctl && m.clusters == c && m.placements == p
            });
            let bar = match row {
                None => None,
                Some(m) => {
                    let (Some(p50), Some(p99)) = (m.p50_ms, m.p99_ms) else {
                        return Err(src.missing(format!(
                            "moves row {c} x {p} ({ctl:?}) without p50_ms and p99_ms"
                        )));
                    };
                    Some(Bar {
                        value: p50.max(1.0),
                        label: number(p50),
                        whisker: Some((p99, number(p99))),
                    })
                }
            };
            bars.push(bar);
        }
        let label = if p == 1 {
            format!("{} clusters × 1 placement", count(c))
        } else {
            format!("{} clusters × {} placements (the last)", count(c), count(p))
        };
        groups.push((label, bars));
    }
    render(&Bars {
        figure: "reaction.svg",
        title: "Reaction: a score write to the moved PlacementDecision, ours and upstream".into(),
        subtitle: "milliseconds, log scale, lower is better; bar: p50 (inside), whisker: p99 (above); 30 moves per shape, numberOfClusters 1, one AddOn prioritizer".into(),
        y_desc: "milliseconds (log scale)",
        log: true,
        groups,
        legend: vec![
            ("ours, run 1".into(), OURS),
            ("ours, run 2".into(), OURS_LIGHT),
            ("upstream OCM, run 1".into(), UPSTREAM),
            ("upstream OCM, run 2".into(), UPSTREAM_LIGHT),
        ],
        missing: "not measured",
        sources: vec![&runs[0], &runs[1]],
    })
}

/// Peak RSS per throughput shape, ours and upstream.
pub fn memory(sources: &[&Source]) -> Result<String, Error> {
    let mut groups = Vec::new();
    for src in sources {
        let mut shapes: Vec<(u64, u64)> = Vec::new();
        for t in &src.run.throughput {
            if !shapes.contains(&(t.placements, t.clusters)) {
                shapes.push((t.placements, t.clusters));
            }
        }
        if shapes.is_empty() {
            return Err(src.missing("no throughput rows"));
        }
        for (p, c) in shapes {
            let bar = |ctl| {
                src.throughput(ctl, p, c)
                    .and_then(|t| t.peak_rss_mb)
                    .map(|value| Bar {
                        value,
                        label: format!("{} MB", number(value)),
                        whisker: None,
                    })
            };
            groups.push((
                format!(
                    "{} Placements × {} clusters ({})",
                    count(p),
                    count(c),
                    src.run.date
                ),
                vec![bar(Controller::Ours), bar(Controller::Upstream)],
            ));
        }
    }
    render(&Bars {
        figure: "memory.svg",
        title: "Memory: the controller's peak RSS, ours and upstream".into(),
        subtitle:
            "MB (10^6 bytes, VmHWM over the whole run), lower is better; upstream's benchmark shape"
                .into(),
        y_desc: "MB",
        log: false,
        groups,
        legend: vec![("ours".into(), OURS), ("upstream OCM".into(), UPSTREAM)],
        missing: "not measured",
        sources: sources.to_vec(),
    })
}
