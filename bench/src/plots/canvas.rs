//! A raster of palette indices to draw a plot on (clipped: drawing off the
//! edge is ignored), with a 3×5 pixel font for its few labels.

pub struct Canvas {
    pub width: u32,
    pub height: u32,
    px: Vec<u8>,
}

impl Canvas {
    pub fn new(width: u32, height: u32, background: u8) -> Canvas {
        Canvas {
            width,
            height,
            px: vec![background; width as usize * height as usize],
        }
    }

    pub fn pixels(&self) -> &[u8] {
        &self.px
    }

    fn index(&self, x: i32, y: i32) -> Option<usize> {
        let (x, y) = (u32::try_from(x).ok()?, u32::try_from(y).ok()?);
        (x < self.width && y < self.height).then(|| (y * self.width + x) as usize)
    }

    pub fn set(&mut self, x: i32, y: i32, c: u8) {
        self.paint(x, y, |_| c);
    }

    /// Recolours one pixel by what it is now (a fill over a fill).
    pub fn paint(&mut self, x: i32, y: i32, f: impl Fn(u8) -> u8) {
        if let Some(i) = self.index(x, y) {
            self.px[i] = f(self.px[i]);
        }
    }

    /// Recolours the pixels with x in `x0..x1` and y in `y0..y1`.
    pub fn fill(&mut self, (x0, x1): (i32, i32), (y0, y1): (i32, i32), f: impl Fn(u8) -> u8) {
        for y in y0..y1 {
            for x in x0..x1 {
                self.paint(x, y, &f);
            }
        }
    }

    /// A line `thick` pixels wide (a square brush along Bresenham's line).
    pub fn line(&mut self, (x0, y0): (i32, i32), (x1, y1): (i32, i32), c: u8, thick: i32) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = ((x1 - x0).signum(), (y1 - y0).signum());
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        loop {
            self.fill(
                (x, x + thick),
                (y - thick / 2, y - thick / 2 + thick),
                |_| c,
            );
            if x == x1 && y == y1 {
                return;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// `s` with its top left at (x, y), each font pixel `scale` wide;
    /// returns the x after it.
    pub fn text(&mut self, x: i32, y: i32, s: &str, c: u8, scale: i32) -> i32 {
        let mut at = x;
        for ch in s.chars() {
            let rows = glyph(ch);
            for (r, bits) in rows.iter().enumerate() {
                for col in 0..3 {
                    if bits & (0b100 >> col) != 0 {
                        let (px, py) = (at + col * scale, y + r as i32 * scale);
                        self.fill((px, px + scale), (py, py + scale), |_| c);
                    }
                }
            }
            at += ADVANCE * scale;
        }
        at
    }
}

/// Font pixels from one character's left edge to the next's.
pub const ADVANCE: i32 = 4;

/// Width in pixels of `s` at `scale`, without the last gap.
pub fn text_width(s: &str, scale: i32) -> i32 {
    (s.chars().count() as i32 * ADVANCE - 1).max(0) * scale
}

/// A character's five rows of three pixels (bit 2 the left one). Lower
/// case is drawn as upper case; a character the font lacks, as a block
/// (visibly wrong).
fn glyph(ch: char) -> [u8; 5] {
    let ch = ch.to_ascii_uppercase();
    FONT.iter()
        .find(|(c, _)| *c == ch)
        .map_or([0b111; 5], |(_, rows)| *rows)
}

const FONT: &[(char, [u8; 5])] = &[
    (' ', [0, 0, 0, 0, 0]),
    ('0', [0b111, 0b101, 0b101, 0b101, 0b111]),
    ('1', [0b010, 0b110, 0b010, 0b010, 0b111]),
    ('2', [0b111, 0b001, 0b111, 0b100, 0b111]),
    ('3', [0b111, 0b001, 0b111, 0b001, 0b111]),
    ('4', [0b101, 0b101, 0b111, 0b001, 0b001]),
    ('5', [0b111, 0b100, 0b111, 0b001, 0b111]),
    ('6', [0b111, 0b100, 0b111, 0b101, 0b111]),
    ('7', [0b111, 0b001, 0b001, 0b010, 0b010]),
    ('8', [0b111, 0b101, 0b111, 0b101, 0b111]),
    ('9', [0b111, 0b101, 0b111, 0b001, 0b111]),
    ('A', [0b010, 0b101, 0b111, 0b101, 0b101]),
    ('B', [0b110, 0b101, 0b110, 0b101, 0b110]),
    ('C', [0b011, 0b100, 0b100, 0b100, 0b011]),
    ('D', [0b110, 0b101, 0b101, 0b101, 0b110]),
    ('E', [0b111, 0b100, 0b110, 0b100, 0b111]),
    ('F', [0b111, 0b100, 0b110, 0b100, 0b100]),
    ('G', [0b011, 0b100, 0b101, 0b101, 0b011]),
    ('H', [0b101, 0b101, 0b111, 0b101, 0b101]),
    ('I', [0b111, 0b010, 0b010, 0b010, 0b111]),
    ('J', [0b001, 0b001, 0b001, 0b101, 0b010]),
    ('K', [0b101, 0b101, 0b110, 0b101, 0b101]),
    ('L', [0b100, 0b100, 0b100, 0b100, 0b111]),
    ('M', [0b101, 0b111, 0b111, 0b101, 0b101]),
    ('N', [0b110, 0b101, 0b101, 0b101, 0b101]),
    ('O', [0b010, 0b101, 0b101, 0b101, 0b010]),
    ('P', [0b110, 0b101, 0b110, 0b100, 0b100]),
    ('Q', [0b010, 0b101, 0b101, 0b110, 0b011]),
    ('R', [0b110, 0b101, 0b110, 0b101, 0b101]),
    ('S', [0b011, 0b100, 0b010, 0b001, 0b110]),
    ('T', [0b111, 0b010, 0b010, 0b010, 0b010]),
    ('U', [0b101, 0b101, 0b101, 0b101, 0b111]),
    ('V', [0b101, 0b101, 0b101, 0b101, 0b010]),
    ('W', [0b101, 0b101, 0b111, 0b111, 0b101]),
    ('X', [0b101, 0b101, 0b010, 0b101, 0b101]),
    ('Y', [0b101, 0b101, 0b010, 0b010, 0b010]),
    ('Z', [0b111, 0b001, 0b010, 0b100, 0b111]),
    ('.', [0, 0, 0, 0, 0b010]),
    (',', [0, 0, 0, 0b010, 0b100]),
    (':', [0, 0b010, 0, 0b010, 0]),
    ('=', [0, 0b111, 0, 0b111, 0]),
    ('-', [0, 0, 0b111, 0, 0]),
    ('+', [0, 0b010, 0b111, 0b010, 0]),
    ('/', [0b001, 0b001, 0b010, 0b100, 0b100]),
    ('(', [0b010, 0b100, 0b100, 0b100, 0b010]),
    (')', [0b010, 0b001, 0b001, 0b001, 0b010]),
    ('%', [0b101, 0b001, 0b010, 0b100, 0b101]),
    ('>', [0b100, 0b010, 0b001, 0b010, 0b100]),
    ('<', [0b001, 0b010, 0b100, 0b010, 0b001]),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawing_is_clipped_and_text_advances() {
        let mut c = Canvas::new(10, 6, 0);
        c.line((-5, 2), (20, 2), 1, 1);
        assert_eq!(c.pixels()[20..30], [1; 10]);
        let end = c.text(0, 0, "1a", 2, 1);
        assert_eq!((end, text_width("1a", 1)), (8, 7));
        // '1' top row 010; 'A' top row 010 at x = 4.
        assert_eq!(c.pixels()[..7], [0, 2, 0, 0, 0, 2, 0]);
        assert_eq!(glyph('~'), [0b111; 5]);
    }
}
