//! The benchmark report, `docs/benchmarks.md`, and its SVG charts.
//!
//! Each benchmark owns one section of the report, between `<!-- bench:NAME:begin -->` and
//! `<!-- bench:NAME:end -->`, and rewrites only that section, so `cargo xtask bench scale` and
//! the issue-10 benches can run at different times without erasing each other's figures.
//! Charts are drawn with plotters' SVG backend only: text is emitted as SVG `<text>` elements,
//! so no font files or fontconfig are needed.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use crate::project_root;

/// Replaces (or appends) the section `name` of `docs/benchmarks.md` with `body`.
pub(crate) fn write_section(name: &str, body: &str) -> anyhow::Result<()> {
    let path = project_root().join("docs/benchmarks.md");
    let old = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        "# Benchmarks\n\nFigures measured by `cargo xtask bench` on one machine in one run; only \
         ratios from one run mean anything, since the machine's speed changes from hour to \
         hour.\n"
            .to_owned()
    });
    let new = replace_section(&old, name, body);
    std::fs::write(&path, new).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("bench: wrote the {name} section of {}", path.display());
    Ok(())
}

fn replace_section(doc: &str, name: &str, body: &str) -> String {
    let begin = format!("<!-- bench:{name}:begin -->");
    let end = format!("<!-- bench:{name}:end -->");
    let section = format!("{begin}\n{}\n{end}", body.trim_end());
    match (doc.find(&begin), doc.find(&end)) {
        (Some(start), Some(stop)) if stop > start => {
            format!("{}{section}{}", &doc[..start], &doc[stop + end.len()..])
        }
        _ => format!("{}\n{section}\n", doc.trim_end()),
    }
}

/// One line of a chart: a name and its points.
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// A chart's frame.
pub(crate) struct Chart<'a> {
    pub(crate) title: &'a str,
    pub(crate) x_label: &'a str,
    pub(crate) y_label: &'a str,
    /// Logarithmic axes (values must then be positive).
    pub(crate) log_x: bool,
    pub(crate) log_y: bool,
}

/// Draws `series` as lines with points into the SVG file `path`.
pub(crate) fn line_chart(path: &Path, chart: &Chart<'_>, series: &[Series]) -> anyhow::Result<()> {
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    let (mut x_min, mut x_max, mut y_min, mut y_max) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in points() {
        x_min = x_min.min(x);
        x_max = x_max.max(x);
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    anyhow::ensure!(x_min <= x_max, "nothing to draw in {}", path.display());
    let widen = |lo: f64, hi: f64, log: bool| {
        if log {
            (lo / 1.5, hi * 1.5)
        } else {
            (0.0, hi * 1.1 + f64::EPSILON)
        }
    };
    let (x0, x1) = widen(x_min, x_max, chart.log_x);
    let (y0, y1) = widen(y_min, y_max, chart.log_y);
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(chart.title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70);
    // plotters types its axes by range kind, so the four combinations are spelled out.
    macro_rules! draw {
        ($x:expr, $y:expr) => {{
            let mut ctx = builder.build_cartesian_2d($x, $y).map_err(draw_error)?;
            ctx.configure_mesh()
                .x_desc(chart.x_label)
                .y_desc(chart.y_label)
                .draw()
                .map_err(draw_error)?;
            for (n, s) in series.iter().enumerate() {
                let color = Palette99::pick(n).to_rgba();
                ctx.draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(draw_error)?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
                ctx.draw_series(
                    s.points
                        .iter()
                        .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
                )
                .map_err(draw_error)?;
            }
            ctx.configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(draw_error)?;
        }};
    }
    match (chart.log_x, chart.log_y) {
        (true, true) => draw!((x0..x1).log_scale(), (y0..y1).log_scale()),
        (true, false) => draw!((x0..x1).log_scale(), y0..y1),
        (false, true) => draw!(x0..x1, (y0..y1).log_scale()),
        (false, false) => draw!(x0..x1, y0..y1),
    }
    root.present().map_err(draw_error)?;
    Ok(())
}

fn draw_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing the chart failed: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_is_replaced_in_place_or_appended() {
        let doc = "# B\n\nintro\n";
        let once = replace_section(doc, "scale", "one");
        assert_eq!(
            once,
            "# B\n\nintro\n<!-- bench:scale:begin -->\none\n<!-- bench:scale:end -->\n"
        );
        let other = replace_section(&once, "stdio", "s");
        let twice = replace_section(&other, "scale", "two\n");
        assert!(twice.contains("<!-- bench:scale:begin -->\ntwo\n<!-- bench:scale:end -->"));
        assert!(!twice.contains("one"));
        assert!(twice.contains("<!-- bench:stdio:begin -->\ns\n<!-- bench:stdio:end -->"));
        assert!(twice.find("bench:scale").unwrap() < twice.find("bench:stdio").unwrap());
    }

    #[test]
    fn a_chart_is_an_svg_with_its_labels() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.svg");
        let series = [
            Series {
                name: "alpha".to_owned(),
                points: vec![(1000.0, 1.5), (10000.0, 2.0), (100000.0, 9.0)],
            },
            Series {
                name: "beta".to_owned(),
                points: vec![(1000.0, 0.5), (100000.0, 0.7)],
            },
        ];
        let chart = Chart {
            title: "latency",
            x_label: "tasks",
            y_label: "ms",
            log_x: true,
            log_y: true,
        };
        line_chart(&path, &chart, &series).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        for label in ["latency", "alpha", "beta", "tasks", "ms"] {
            assert!(svg.contains(label), "{label} missing");
        }
    }
}
