//! Every figure of the page as a PNG (`--png DIR`), rasterised by resvg (pure Rust) with DejaVu
//! Sans embedded in the binary: no system font or library is assumed, so the same run gives the
//! same pixels on every machine. Twice the SVG's size, for print and slides.

use anyhow::{anyhow, Result};
use resvg::{tiny_skia, usvg};

use super::exporter::{Exporter, Part, RunData};

/// Pixels per SVG unit.
const SCALE: f32 = 2.0;

pub struct PngFigures;

/// The rasteriser's options: the embedded fonts, DejaVu Sans as every generic family.
fn options() -> usvg::Options<'static> {
    let mut opt = usvg::Options { font_family: "DejaVu Sans".into(), ..usvg::Options::default() };
    let db = opt.fontdb_mut();
    db.load_font_data(dejavu::sans::regular().to_vec());
    db.load_font_data(dejavu::sans::bold().to_vec());
    db.set_sans_serif_family("DejaVu Sans");
    db.set_serif_family("DejaVu Sans");
    db.set_monospace_family("DejaVu Sans");
    opt
}

/// One SVG document as PNG bytes.
pub fn rasterise(svg: &str, opt: &usvg::Options) -> Result<Vec<u8>> {
    let tree = usvg::Tree::from_str(svg, opt).map_err(|e| anyhow!("the figure's SVG does not parse: {e}"))?;
    let size = tree.size();
    let (w, h) = ((size.width() * SCALE).ceil() as u32, (size.height() * SCALE).ceil() as u32);
    let mut pix = tiny_skia::Pixmap::new(w.max(1), h.max(1)).ok_or_else(|| anyhow!("a {w}×{h} image"))?;
    pix.fill(tiny_skia::Color::WHITE);
    resvg::render(&tree, tiny_skia::Transform::from_scale(SCALE, SCALE), &mut pix.as_mut());
    pix.encode_png().map_err(|e| anyhow!("PNG encoding: {e}"))
}

impl Exporter for PngFigures {
    fn what(&self) -> &'static str {
        "figures (PNG)"
    }
    fn serialize(&self, run: &RunData) -> Result<Vec<Part>> {
        let opt = options();
        run.page()?
            .figures
            .iter()
            .map(|f| {
                let bytes = rasterise(&f.svg, &opt).map_err(|e| anyhow!("figure {}: {e}", f.id))?;
                Ok(Part { name: Some(format!("{}.png", f.id)), bytes })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_rasterises_with_its_text_drawn_by_the_embedded_font() {
        let opt = options();
        let with_text = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"60\" height=\"20\" font-family=\"DejaVu Sans, sans-serif\"><text x=\"2\" y=\"15\" font-size=\"14\" fill=\"#000000\">Wg</text></svg>";
        let without = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"60\" height=\"20\"></svg>";
        let a = rasterise(with_text, &opt).unwrap();
        let b = rasterise(without, &opt).unwrap();
        assert_eq!(&a[1..4], b"PNG");
        // The text changed pixels: the font was found without any system font.
        assert_ne!(a, b, "the text drew nothing: the embedded font was not used");
        assert!(rasterise("<svg", &opt).is_err());
    }
}
