//! PNG charts with plotters' bitmap backend, encoded by the `png` crate:
//! the headline's grouped bars and the flush sweep's log-log lines.

use anyhow::{Context, Result, anyhow};
use plotters::prelude::*;
use std::path::Path;

/// The grouped bars' size: six groups of up to four bars.
const BARS_SIZE: (u32, u32) = (1100, 550);
const LINES_SIZE: (u32, u32) = (900, 500);

/// Fonts tried in turn; text needs one (plotters has no built-in font).
pub const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

const COLORS: [RGBColor; 4] = [
    RGBColor(90, 110, 160),
    RGBColor(220, 120, 40),
    RGBColor(150, 170, 215),
    RGBColor(240, 180, 120),
];

fn register_font() -> Result<()> {
    let bytes = FONTS
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .context("no TrueType font found (apt-get install fonts-dejavu-core)")?;
    // plotters keeps fonts for the whole process: leaking one is intended.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("the font file is not a usable TrueType font"))
}

/// One bar: its height (none: not measured, drawn as `n/a`) and where a
/// whisker above it ends (the worst case), if anywhere.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bar {
    pub value: Option<f64>,
    pub high: Option<f64>,
}

/// A group's bars in the order of the series; `None` where a series does
/// not apply to the group (nothing drawn).
pub type Group = (String, Vec<Option<Bar>>);

/// One bar per series in each group, with a whisker up to its `high` and
/// a line across at `reference` if given.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    series: &[&str],
    groups: &[Group],
    reference: Option<(f64, &str)>,
) -> Result<()> {
    register_font()?;
    let size = BARS_SIZE;
    let mut pixels = vec![0u8; (size.0 * size.1 * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let bar = |g: &Group, k: usize| g.1.get(k).copied().flatten();
        let top = groups
            .iter()
            .flat_map(|g| (0..series.len()).filter_map(move |k| bar(g, k)))
            .flat_map(|b| [b.value, b.high])
            .flatten()
            .chain(reference.map(|r| r.0))
            .fold(1.0f64, f64::max)
            // Headroom for the legend, top left, above the tallest bar.
            * 1.45;
        let n = groups.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n, 0.0..top)
            .map_err(|e| anyhow!("{e}"))?;
        let labels: Vec<String> = groups.iter().map(|g| g.0.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(groups.len() * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor();
                // Label only the group centres.
                if (x - i - 0.5).abs() < 1e-6 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(y_label)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        // The bars of a group share 80% of its width; with four, the
        // values are smaller so that they fit above their bars.
        let width = 0.8 / series.len().max(1) as f64;
        let font = if series.len() > 3 { 11 } else { 14 };
        for (k, name) in series.iter().enumerate() {
            let color = COLORS.get(k).copied().unwrap_or(BLACK);
            let left = move |i: usize| i as f64 + 0.1 + width * k as f64;
            let bars = groups.iter().enumerate().filter_map(move |(i, g)| {
                let value = bar(g, k)?.value?;
                Some(Rectangle::new(
                    [(left(i), 0.0), (left(i) + width * 0.92, value)],
                    color.filled(),
                ))
            });
            chart
                .draw_series(bars)
                .map_err(|e| anyhow!("{e}"))?
                .label(*name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
            let whiskers = groups.iter().enumerate().filter_map(move |(i, g)| {
                let b = bar(g, k)?;
                let (value, high) = (b.value?, b.high?);
                let x = left(i) + width * 0.46;
                Some(PathElement::new(
                    vec![(x, value), (x, high)],
                    BLACK.stroke_width(2),
                ))
            });
            chart.draw_series(whiskers).map_err(|e| anyhow!("{e}"))?;
            // Text hangs below its anchor: lift it clear of the bar top
            // (of its whisker, when there is one).
            let values = groups.iter().enumerate().filter_map(move |(i, g)| {
                let b = bar(g, k)?;
                let x = left(i) + width * 0.05;
                Some(match b.value {
                    Some(value) => {
                        let above = b.high.unwrap_or(value).max(value);
                        Text::new(
                            if series.len() > 3 {
                                format!("{value:.2}")
                            } else {
                                format!("{value:.2}x")
                            },
                            (x, above + top * 0.05),
                            ("sans-serif", font),
                        )
                    }
                    None => Text::new("n/a".to_owned(), (x, top * 0.05), ("sans-serif", font)),
                })
            });
            chart.draw_series(values).map_err(|e| anyhow!("{e}"))?;
        }
        if let Some((at, label)) = reference {
            let grey = RGBColor(120, 120, 120);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(0.0, at), (n, at)],
                    grey.stroke_width(1),
                )))
                .map_err(|e| anyhow!("{e}"))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        root.present().map_err(|e| anyhow!("{e}"))?;
    }
    write_png(path, size, &pixels)
}

/// One line with markers per series, both axes logarithmic.
pub fn log_log_lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
) -> Result<()> {
    register_font()?;
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, points)| points.iter().copied())
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .collect();
    if all.is_empty() {
        return Err(anyhow!("nothing to plot"));
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in &all {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    let size = LINES_SIZE;
    let mut pixels = vec![0u8; (size.0 * size.1 * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(
                (x0 / 2.0..x1 * 2.0).log_scale(),
                (y0 / 10.0..y1 * 10.0).log_scale(),
            )
            .map_err(|e| anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y}"))
            .x_desc(x_label)
            .y_desc(y_label)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        for (k, (name, points)) in series.iter().enumerate() {
            let color = COLORS.get(k).copied().unwrap_or(BLACK);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    points.clone(),
                    color.stroke_width(2),
                )))
                .map_err(|e| anyhow!("{e}"))?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))
                .map_err(|e| anyhow!("{e}"))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        root.present().map_err(|e| anyhow!("{e}"))?;
    }
    write_png(path, size, &pixels)
}

fn write_png(path: &Path, size: (u32, u32), rgb: &[u8]) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), size.0, size.1);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().context("writing the PNG header")?;
    writer
        .write_image_data(rgb)
        .context("writing the PNG data")?;
    writer.finish().context("finishing the PNG")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_written_as_png() {
        if !FONTS.iter().any(|f| Path::new(f).is_file()) {
            eprintln!("skipped: no TrueType font installed (fonts-dejavu-core)");
            return;
        }
        let path = std::env::temp_dir().join(format!("tcgkit-chart-{}.png", std::process::id()));
        let bar = |value, high| {
            Some(Bar {
                value: Some(value),
                high,
            })
        };
        let groups = vec![
            (
                "bare".to_owned(),
                vec![bar(3.5, Some(5.9)), bar(3.4, None), None],
            ),
            (
                "mem callback".to_owned(),
                vec![
                    bar(2.6, Some(4.6)),
                    Some(Bar {
                        value: None,
                        high: None,
                    }),
                    bar(4.0, None),
                ],
            ),
        ];
        grouped_bars(
            &path,
            "t",
            "x",
            &["a", "b", "c"],
            &groups,
            Some((1.0, "QEMU")),
        )
        .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
        let lines = [
            ("flush", vec![(1e3, 1.0), (1e6, 1.2)]),
            ("reclaim", vec![(1e3, 30.0), (1e6, 5e4)]),
        ];
        log_log_lines(&path, "t", "x", "y", &lines).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 1000);
        assert!(log_log_lines(&path, "t", "x", "y", &[("empty", Vec::new())]).is_err());
        std::fs::remove_file(&path).unwrap();
    }
}
