//! A minimal PNG writer: indexed colour at 4 bits a pixel (up to 16
//! colours), the zlib stream made of stored (uncompressed) deflate blocks.
//!
//! Hand-written because the `png` crate (and flate2, miniz) is not in the
//! offline registry this workspace builds from. Stored blocks keep it this
//! short and need no compressor: a plot's file is its raw size, about
//! width × height / 2 bytes, tens of KB for the plots it writes.

/// The PNG signature.
const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
/// The most a stored deflate block holds (its length is 16 bits).
const STORED_MAX: usize = 0xffff;

/// CRC-32 (ISO-HDLC: PNG's chunks, zlib's `crc32`), table built at compile time.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
};

pub fn crc32(parts: &[&[u8]]) -> u32 {
    let mut c = !0u32;
    for b in parts.iter().flat_map(|p| p.iter()) {
        c = CRC_TABLE[((c ^ u32::from(*b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// Adler-32, the zlib stream's checksum of the uncompressed data.
pub fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 bytes is the most that cannot overflow `b` before the modulo.
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

/// A zlib stream (RFC 1950) of stored deflate blocks (RFC 1951 §3.2.4).
pub fn zlib_stored(data: &[u8]) -> Vec<u8> {
    // CMF 0x78: deflate, 32 KB window; FLG 0x01: no dictionary, and
    // 0x7801 is a multiple of 31 as the header check requires.
    let mut out = vec![0x78, 0x01];
    let mut blocks = data.chunks(STORED_MAX).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        // BFINAL in bit 0, BTYPE 00 (stored); the rest of the byte is padding.
        out.push(u8::from(blocks.peek().is_none()));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc32(&[kind, data]).to_be_bytes());
}

/// A PNG of `width` × `height` palette indices (row by row, each below
/// `palette.len()`, at most 16 colours).
pub fn encode(
    width: u32,
    height: u32,
    palette: &[[u8; 3]],
    pixels: &[u8],
) -> Result<Vec<u8>, String> {
    if width == 0 || height == 0 || pixels.len() as u64 != u64::from(width) * u64::from(height) {
        return Err(format!(
            "{} pixels for a {width}×{height} image",
            pixels.len()
        ));
    }
    if palette.is_empty() || palette.len() > 16 {
        return Err(format!(
            "{} colours (4 bits a pixel: 1 to 16)",
            palette.len()
        ));
    }
    if let Some(p) = pixels.iter().find(|&&p| usize::from(p) >= palette.len()) {
        return Err(format!(
            "colour {p} is not in the palette of {}",
            palette.len()
        ));
    }
    // Each row: filter type 0 (none), then two pixels a byte, high nibble first.
    let mut raw = Vec::with_capacity(height as usize * (1 + (width as usize).div_ceil(2)));
    for row in pixels.chunks(width as usize) {
        raw.push(0);
        raw.extend(
            row.chunks(2)
                .map(|p| p[0] << 4 | p.get(1).copied().unwrap_or(0)),
        );
    }
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    // Bit depth 4, colour type 3 (indexed); deflate, adaptive filtering, no interlace.
    ihdr.extend_from_slice(&[4, 3, 0, 0, 0]);
    let mut out = SIGNATURE.to_vec();
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"PLTE", palette.concat().as_slice());
    chunk(&mut out, b"IDAT", &zlib_stored(&raw));
    chunk(&mut out, b"IEND", &[]);
    Ok(out)
}

#[cfg(test)]
mod tests;
