//! Plot files, as every plotting command writes them: the file kinds (SVG or PNG), the embedded font, and the
//! pieces the charts share (the backend for a kind, a titled chart frame, the framed legend, the drawing
//! error).

use anyhow::{anyhow, bail};
use plotters::coord::ranged1d::AsRangedCoord;
use plotters::coord::types::{RangedCoordf64, RangedCoordu64};
use plotters::coord::{CoordTranslate, Shift};
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

/// Draws `points` as a 2-pixel line of `color`, labelled `label` in the legend.
pub fn labelled_line<DB: DrawingBackend, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    points: Vec<(X::ValueType, Y::ValueType)>,
    color: RGBColor,
    label: String,
) -> anyhow::Result<()>
where
    X::ValueType: Clone + 'static,
    Y::ValueType: Clone + 'static,
{
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(2)))
        .map_err(drawing_error)?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
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

/// Draws the series labels in a framed box at `position`.
pub fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(drawing_error)
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
            let mut c = chart(&root, "diagonal", 0f64..1f64, 0f64..1f64)?;
            c.configure_mesh().draw().map_err(drawing_error)?;
            labelled_line(&mut c, vec![(0.0, 0.0), (1.0, 1.0)], RGBColor(31, 119, 180), "x = y".into())?;
            legend(&mut c, SeriesLabelPosition::UpperLeft)?;
            root.present().map_err(drawing_error)
        }
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
