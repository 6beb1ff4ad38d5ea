//! Plot files, as every plotting command writes them: the file kinds (SVG or PNG), the embedded font, and the
//! pieces the charts share (the backend for a kind, a titled chart frame, the framed legend, the drawing
//! error).

use anyhow::{anyhow, bail};
use plotters::coord::ranged1d::AsRangedCoord;
use plotters::coord::types::{RangedCoordf64, RangedCoordu64};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Plot file kinds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PlotKind {
    Png,
    Svg,
}

impl PlotKind {
    /// The kind a file name ends in (`.png`, `.svg`, any case).
    pub fn of(path: &Path) -> anyhow::Result<Self> {
        match path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase()).as_deref() {
            Some("png") => Ok(PlotKind::Png),
            Some("svg") => Ok(PlotKind::Svg),
            _ => bail!("--plot {}: the file name must end in .png or .svg", path.display()),
        }
    }

    /// The kind named `svg` or `png` (any case).
    pub fn from_name(s: &str) -> anyhow::Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "svg" => Ok(PlotKind::Svg),
            "png" => Ok(PlotKind::Png),
            other => bail!("unknown format '{other}' (known: svg, png)"),
        }
    }

    /// The file name extension.
    pub fn ext(self) -> &'static str {
        match self {
            PlotKind::Svg => "svg",
            PlotKind::Png => "png",
        }
    }
}

/// Line colours, in order (matplotlib's "tab10").
pub const PALETTE: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

/// A picture that draws itself on any plotters backend.
pub trait Figure {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> anyhow::Result<()>;
}

/// Draws `figure` on a canvas of `size` pixels and writes it to `path` as `kind`.
pub fn save(path: &Path, kind: PlotKind, size: (u32, u32), figure: &impl Figure) -> anyhow::Result<()> {
    register_font()?;
    match kind {
        PlotKind::Png => figure.draw(BitMapBackend::new(path, size).into_drawing_area()),
        PlotKind::Svg => figure.draw(SVGBackend::new(path, size).into_drawing_area()),
    }
}

/// Draws `figure` into `path` as [`save`] does, then says on stderr where the plot went (standard output may
/// carry the table, CSV or JSON).
pub fn save_and_report(path: &Path, kind: PlotKind, size: (u32, u32), figure: &impl Figure) -> anyhow::Result<()> {
    save(path, kind, size, figure)?;
    eprintln!("blockwell: wrote the plot to {}", path.display());
    Ok(())
}

/// The error of a failed drawing call.
pub fn drawing_error<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> anyhow::Error {
    anyhow!("drawing failed: {e}")
}

/// A chart over the ranges `X` and `Y` on a backend `DB`.
pub type Chart<'a, DB, X, Y> =
    ChartContext<'a, DB, Cartesian2d<<X as AsRangedCoord>::CoordDescType, <Y as AsRangedCoord>::CoordDescType>>;

/// A white canvas with a chart of `title` over `x` and `y`, with room for axis labels.
pub fn chart<'a, DB: DrawingBackend, X: AsRangedCoord, Y: AsRangedCoord>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
    x: X,
    y: Y,
) -> anyhow::Result<Chart<'a, DB, X, Y>> {
    root.fill(&WHITE).map_err(drawing_error)?;
    ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(drawing_error)
}

/// Draws `points` as a 2-pixel line of `color` (its legend entry is drawn by [`draw_legend`]).
pub fn line<DB: DrawingBackend, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    points: Vec<(X::ValueType, Y::ValueType)>,
    color: RGBColor,
) -> anyhow::Result<()>
where
    X::ValueType: Clone + 'static,
    Y::ValueType: Clone + 'static,
{
    chart.draw_series(LineSeries::new(points, color.stroke_width(2))).map_err(drawing_error)?;
    Ok(())
}

/// Marks `points` with filled circles of `color` (the points a table lists), as matplotlib's `marker="o"`.
pub fn marks<DB: DrawingBackend, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    points: &[(X::ValueType, Y::ValueType)],
    color: RGBColor,
) -> anyhow::Result<()>
where
    X::ValueType: Clone + 'static,
    Y::ValueType: Clone + 'static,
{
    chart
        .draw_series(points.iter().map(|p| Circle::new(p.clone(), MARK_RADIUS, color.filled())))
        .map_err(drawing_error)?;
    Ok(())
}

/// The radius of a point's mark, in pixels.
const MARK_RADIUS: u32 = 4;

/// The vertices of a step line over intervals: the first from `start` to its x, each next from the previous x
/// to its own, each y held over its interval (matplotlib's `step(where="pre")` through `start` and the points):
/// a value that holds over an interval is drawn as the interval.
pub fn steps<X: Copy, Y: Copy>(start: X, points: &[(X, Y)]) -> Vec<(X, Y)> {
    let mut out = Vec::with_capacity(2 * points.len());
    for (i, &(x, y)) in points.iter().enumerate() {
        out.push((if i == 0 { start } else { points[i - 1].0 }, y));
        out.push((x, y));
    }
    out
}

/// One series in a legend: its label, its colour, and whether its points are marked.
pub struct LegendEntry {
    pub label: String,
    pub color: RGBColor,
    pub marked: bool,
}

/// Where [`split_for_legend`] put the legend.
pub struct LegendArea<DB: DrawingBackend> {
    area: DrawingArea<DB, Shift>,
    below: bool,
}

/// Height of a legend row and size of its text, in pixels.
const LEGEND_ROW: i32 = 22;
const LEGEND_FONT: u32 = 15;

/// Fills `root` white and splits it into the chart's area and the legend's, so that the legend covers no data:
/// a column at the right as wide as the longest label, or, when that would take more than a third of the
/// width, rows below the chart.
pub fn split_for_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
) -> anyhow::Result<(DrawingArea<DB, Shift>, LegendArea<DB>)> {
    root.fill(&WHITE).map_err(drawing_error)?;
    let font: TextStyle = ("sans-serif", LEGEND_FONT).into();
    let text = entries
        .iter()
        .map(|e| root.estimate_text_size(&e.label, &font).map_or(9 * e.label.len() as u32, |(w, _)| w))
        .max()
        .unwrap_or(0);
    let (w, h) = root.dim_in_pixel();
    let column = text + 60;
    if column <= w / 3 {
        let (chart, legend) = root.split_horizontally(w - column);
        Ok((chart, LegendArea { area: legend, below: false }))
    } else {
        let rows = (entries.len() as u32 * LEGEND_ROW as u32 + 16).min(h / 2);
        let (chart, legend) = root.split_vertically(h - rows);
        Ok((chart, LegendArea { area: legend, below: true }))
    }
}

/// Draws the legend's entries in its area: a line of each series' colour (with a mark if its points are
/// marked) and its label.
pub fn draw_legend<DB: DrawingBackend>(legend: &LegendArea<DB>, entries: &[LegendEntry]) -> anyhow::Result<()> {
    // Beside the chart the rows start level with the plot's top (below the title); below it, at the top.
    let (x0, y0) = if legend.below { (90, 8 + LEGEND_ROW / 2) } else { (4, 70) };
    for (i, e) in entries.iter().enumerate() {
        let y = y0 + LEGEND_ROW * i as i32;
        let a = &legend.area;
        a.draw(&PathElement::new(vec![(x0, y), (x0 + 30, y)], e.color.stroke_width(2))).map_err(drawing_error)?;
        if e.marked {
            a.draw(&Circle::new((x0 + 15, y), MARK_RADIUS, e.color.filled())).map_err(drawing_error)?;
        }
        a.draw(&Text::new(e.label.clone(), (x0 + 38, y - 8), ("sans-serif", LEGEND_FONT))).map_err(drawing_error)?;
    }
    Ok(())
}

/// The axes of a miss-ratio curve: cache size in blocks of `block_size` (counts shortened), miss ratio.
pub fn miss_ratio_axes<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordu64, RangedCoordf64>>,
    block_size: u64,
) -> anyhow::Result<()> {
    chart
        .configure_mesh()
        .x_desc(format!("cache size (blocks of {block_size} B)"))
        .y_desc("miss ratio")
        .x_label_formatter(&|x| short_count(*x))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .draw()
        .map_err(drawing_error)
}

/// `1500` → `1.5k`, `2000000` → `2M`.
pub fn short_count(x: u64) -> String {
    let f = x as f64;
    let (v, suffix) = if x >= 1_000_000_000 {
        (f / 1e9, "G")
    } else if x >= 1_000_000 {
        (f / 1e6, "M")
    } else if x >= 1_000 {
        (f / 1e3, "k")
    } else {
        return x.to_string();
    };
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{suffix}")
}

/// The font embedded for plot text (see `assets/FONTS.md`).
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Registers the embedded font with plotters (once); [`save`] calls it first.
fn register_font() -> anyhow::Result<()> {
    static ONCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *ONCE
        .get_or_init(|| plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, FONT).is_ok());
    if !ok {
        bail!("the embedded plot font does not load");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_file_names_and_names() {
        assert_eq!(PlotKind::of(Path::new("a.PNG")).unwrap(), PlotKind::Png);
        assert_eq!(PlotKind::of(Path::new("a.svg")).unwrap(), PlotKind::Svg);
        assert!(PlotKind::of(Path::new("a.pdf")).is_err());
        assert_eq!(PlotKind::from_name("SVG").unwrap().ext(), "svg");
        assert_eq!(PlotKind::from_name("png").unwrap().ext(), "png");
        assert_eq!(PlotKind::from_name("pdf").unwrap_err().to_string(), "unknown format 'pdf' (known: svg, png)");
    }

    struct Diagonal;

    impl Figure for Diagonal {
        fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> anyhow::Result<()> {
            let entries = [LegendEntry { label: "x = y".into(), color: RGBColor(31, 119, 180), marked: true }];
            let (area, legend) = split_for_legend(&root, &entries)?;
            let mut c = chart(&area, "diagonal", 0f64..1f64, 0f64..1f64)?;
            c.configure_mesh().draw().map_err(drawing_error)?;
            line(&mut c, vec![(0.0, 0.0), (1.0, 1.0)], entries[0].color)?;
            marks(&mut c, &[(0.5, 0.5)], entries[0].color)?;
            draw_legend(&legend, &entries)?;
            root.present().map_err(drawing_error)
        }
    }

    #[test]
    fn steps_hold_each_value_over_the_interval_it_ends() {
        assert_eq!(
            steps(5, &[(10, 0.5), (20, 0.25), (30, 0.75)]),
            [(5, 0.5), (10, 0.5), (10, 0.25), (20, 0.25), (20, 0.75), (30, 0.75)]
        );
        assert_eq!(steps::<u64, f64>(0, &[]), []);
    }

    #[test]
    fn saves_a_figure_as_svg_and_png() {
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("d.svg");
        save(&svg, PlotKind::Svg, (400, 300), &Diagonal).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg") && text.contains("diagonal") && text.contains("x = y"), "{text}");
        let png = dir.path().join("d.png");
        save(&png, PlotKind::Png, (400, 300), &Diagonal).unwrap();
        assert_eq!(&std::fs::read(&png).unwrap()[1..4], b"PNG");
        assert!(save(&dir.path().join("missing/d.svg"), PlotKind::Svg, (400, 300), &Diagonal).is_err());
    }

    #[test]
    fn short_counts() {
        assert_eq!(short_count(950), "950");
        assert_eq!(short_count(1500), "1.5k");
        assert_eq!(short_count(2_000_000), "2M");
    }
}
