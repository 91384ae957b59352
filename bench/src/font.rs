//! Plotters draws text with a font it is given: DejaVu Sans from Debian's fonts-dejavu-core.

use plotters::style::FontStyle;

pub fn load_font() -> Result<(), String> {
    const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
    let bytes = std::fs::read(FONT)
        .map_err(|e| format!("{FONT}: {e} (install Debian's fonts-dejavu-core)"))?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{FONT} is not a font plotters can read"))
}
