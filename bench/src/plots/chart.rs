//! A time-series chart on a [`Canvas`]: seconds across, requests up; the
//! reference band and levels, the in-flight area, the limit's line, ticks,
//! a title and a legend. Sizes fit 640 × 240 with the font at scale 2.

use super::canvas::{text_width, Canvas};
use super::png;

pub const WIDTH: u32 = 640;
pub const HEIGHT: u32 = 240;
const SCALE: i32 = 2;
/// Font height at [`SCALE`].
const TEXT_H: i32 = 5 * SCALE;

pub const BG: u8 = 0;
pub const INK: u8 = 1;
pub const GRID: u8 = 2;
pub const BAND: u8 = 3;
pub const AREA: u8 = 4;
/// The in-flight area over the band.
pub const AREA_IN_BAND: u8 = 5;
pub const LIMIT: u8 = 6;
pub const CAPACITY: u8 = 7;
pub const BOUND: u8 = 8;
pub const MUTED: u8 = 9;

const PALETTE: [[u8; 3]; 10] = [
    [255, 255, 255],
    [40, 40, 40],
    [228, 228, 228],
    [204, 236, 204],
    [253, 208, 162],
    [203, 192, 130],
    [31, 80, 190],
    [40, 130, 40],
    [200, 40, 40],
    [120, 120, 120],
];

/// How a legend entry shows its colour.
#[derive(Clone, Copy)]
pub enum Swatch {
    Line(u8),
    Box(u8),
    Dashes(u8),
}

pub struct Chart {
    canvas: Canvas,
    left: i32,
    top: i32,
    right: i32,
    bottom: i32,
    x_max: f64,
    y_max: f64,
}

/// A tick step of 1, 2 or 5 × 10^k giving at most `n` steps up to `max`.
fn tick_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(f64::MIN_POSITIVE);
    let unit = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * unit)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * unit)
}

impl Chart {
    /// An empty chart of `x_max` seconds and `y_max` requests.
    pub fn new(x_max: f64, y_max: f64) -> Chart {
        Chart {
            canvas: Canvas::new(WIDTH, HEIGHT, BG),
            left: 34,
            top: 40,
            right: WIDTH as i32 - 30,
            bottom: HEIGHT as i32 - 18,
            x_max,
            y_max,
        }
    }

    fn x(&self, secs: f64) -> i32 {
        let f = (secs / self.x_max).clamp(0.0, 1.0);
        self.left + (f * f64::from(self.right - self.left)).round() as i32
    }

    /// Clamped to the plot: a value above `y_max` is drawn at the top.
    fn y(&self, v: f64) -> i32 {
        let f = (v / self.y_max).clamp(0.0, 1.0);
        self.bottom - (f * f64::from(self.bottom - self.top)).round() as i32
    }

    /// The band from `lo` to `hi` over the seconds `t0..t1`.
    pub fn band(&mut self, (t0, t1): (f64, f64), lo: f64, hi: f64) {
        let (x0, x1, y0, y1) = (self.x(t0), self.x(t1), self.y(hi), self.y(lo));
        self.canvas.fill((x0, x1), (y0, y1 + 1), |_| BAND);
    }

    /// The in-flight area, 0 to `v` over `t0..t1`, tinted where it covers the band.
    pub fn area(&mut self, (t0, t1): (f64, f64), v: f64) {
        let (x0, x1, y) = (self.x(t0), self.x(t1), self.y(v));
        self.canvas.fill((x0, x1), (y, self.bottom), |c| {
            if c == BAND {
                AREA_IN_BAND
            } else {
                AREA
            }
        });
    }

    /// A dashed level `v` over `t0..t1` (dashes aligned across calls).
    pub fn level(&mut self, (t0, t1): (f64, f64), v: f64, c: u8) {
        let y = self.y(v);
        for x in self.x(t0)..self.x(t1) {
            if (x / 4) % 2 == 0 {
                self.canvas.set(x, y, c);
            }
        }
    }

    /// A label in the right margin, beside level `v`.
    pub fn label(&mut self, v: f64, s: &str, c: u8) {
        let y = self.y(v) - TEXT_H / 2;
        self.canvas.text(self.right + 4, y, s, c, SCALE);
    }

    /// A line through `(seconds, value)` points.
    pub fn polyline(&mut self, points: &[(f64, f64)], c: u8, thick: i32) {
        let px: Vec<(i32, i32)> = points
            .iter()
            .map(|&(t, v)| (self.x(t), self.y(v)))
            .collect();
        for w in px.windows(2) {
            self.canvas.line(w[0], w[1], c, thick);
        }
        if let [only] = px[..] {
            self.canvas.line(only, only, c, thick);
        }
    }

    /// Grid lines (on the background only), the axes, and their tick labels.
    pub fn axes(&mut self) {
        let ystep = tick_step(self.y_max, 5.0);
        let mut v = 0.0;
        while v <= self.y_max + 1e-9 {
            let y = self.y(v);
            for x in (self.left..self.right).step_by(2) {
                self.canvas.paint(x, y, |c| if c == BG { GRID } else { c });
            }
            let s = format!("{v}");
            let w = text_width(&s, SCALE);
            self.canvas
                .text(self.left - 5 - w, y - TEXT_H / 2, &s, INK, SCALE);
            v += ystep;
        }
        let xstep = tick_step(self.x_max, 8.0);
        let mut t = 0.0;
        while t <= self.x_max + 1e-9 {
            let x = self.x(t);
            self.canvas
                .line((x, self.bottom), (x, self.bottom + 3), INK, 1);
            let s = format!("{t}");
            let w = text_width(&s, SCALE);
            let end = self.canvas.text(x - w / 2, self.bottom + 6, &s, INK, SCALE);
            if t + xstep > self.x_max + 1e-9 {
                self.canvas
                    .text(end + 2 * SCALE, self.bottom + 6, "S", INK, SCALE);
            }
            t += xstep;
        }
        self.canvas
            .line((self.left, self.top), (self.left, self.bottom), INK, 1);
        self.canvas
            .line((self.left, self.bottom), (self.right, self.bottom), INK, 1);
    }

    pub fn title(&mut self, s: &str) {
        self.canvas.text(self.left, 6, s, INK, SCALE);
    }

    /// A row of entries under the title.
    pub fn legend(&mut self, entries: &[(Swatch, &str)]) {
        let (mut x, y) = (self.left, 6 + TEXT_H + 8);
        for &(swatch, s) in entries {
            let mid = y + TEXT_H / 2;
            match swatch {
                Swatch::Line(c) => self.canvas.line((x, mid), (x + 13, mid), c, 2),
                Swatch::Box(c) => self.canvas.fill((x, x + 14), (y, y + TEXT_H), |_| c),
                Swatch::Dashes(c) => {
                    for dx in (0..14).filter(|dx| (dx / 4) % 2 == 0) {
                        self.canvas.set(x + dx, mid, c);
                    }
                }
            }
            x = self.canvas.text(x + 18, y, s, INK, SCALE) + 16;
        }
    }

    pub fn png(&self) -> Result<Vec<u8>, String> {
        png::encode(WIDTH, HEIGHT, &PALETTE, self.canvas.pixels())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_values_map_into_the_plot() {
        assert_eq!(tick_step(45.0, 8.0), 10.0);
        assert_eq!(tick_step(80.0, 5.0), 20.0);
        assert_eq!(tick_step(144.0, 5.0), 50.0);
        assert_eq!(tick_step(7.0, 5.0), 2.0);
        let c = Chart::new(70.0, 80.0);
        assert_eq!((c.x(0.0), c.x(70.0), c.x(99.0)), (c.left, c.right, c.right));
        assert_eq!((c.y(0.0), c.y(80.0), c.y(1000.0)), (c.bottom, c.top, c.top));
    }
}
