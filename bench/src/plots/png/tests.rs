use super::*;

#[test]
fn checksums_match_their_published_check_values() {
    assert_eq!(crc32(&[b"123456789"]), 0xcbf4_3926);
    assert_eq!(
        crc32(&[b"IE", b"ND"]),
        0xae42_6082,
        "IEND's CRC in every PNG"
    );
    assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
    assert_eq!(adler32(b""), 1);
    // Past the 5552-byte stretch between reductions: the definition, reduced at every step.
    let data = vec![0xffu8; 20_000];
    let (a, b) = data.iter().fold((1u64, 0u64), |(a, b), &x| {
        let a = (a + u64::from(x)) % 65521;
        (a, (b + a) % 65521)
    });
    assert_eq!(adler32(&data), (b << 16 | a) as u32);
}

#[test]
fn stored_blocks_split_at_64_kb_and_the_last_is_final() {
    assert_eq!(
        zlib_stored(b""),
        [0x78, 0x01, 1, 0, 0, 0xff, 0xff, 0, 0, 0, 1]
    );
    let data: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    let z = zlib_stored(&data);
    assert_eq!(z.len(), 2 + 5 + 65_535 + 5 + 4_465 + 4);
    assert_eq!(z[2..7], [0, 0xff, 0xff, 0, 0]);
    let second = 7 + 65_535;
    let len = 4_465u16;
    assert_eq!(z[second], 1);
    assert_eq!(z[second + 1..second + 3], len.to_le_bytes());
    assert_eq!(z[second + 3..second + 5], (!len).to_le_bytes());
    assert_eq!(z[7..second], data[..65_535]);
    assert_eq!(z[z.len() - 4..], adler32(&data).to_be_bytes());
}

/// The chunks of a PNG as (type, data), each CRC checked.
fn chunks(png: &[u8]) -> Vec<([u8; 4], Vec<u8>)> {
    assert_eq!(png[..8], SIGNATURE);
    let mut out = Vec::new();
    let mut rest = &png[8..];
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        let kind: [u8; 4] = rest[4..8].try_into().expect("4 bytes");
        let data = &rest[8..8 + len];
        let crc = u32::from_be_bytes(rest[8 + len..12 + len].try_into().expect("4 bytes"));
        assert_eq!(crc, crc32(&[&kind, data]), "{:?}", kind);
        out.push((kind, data.to_vec()));
        rest = &rest[12 + len..];
    }
    out
}

#[test]
fn a_3_by_2_image_has_the_exact_chunks_and_rows() {
    let palette = [
        [0, 0, 0],
        [255, 255, 255],
        [255, 0, 0],
        [0, 255, 0],
        [0, 0, 255],
        [9, 9, 9],
    ];
    let png = encode(3, 2, &palette, &[0, 1, 2, 3, 4, 5]).expect("valid image");
    let c = chunks(&png);
    let kinds: Vec<&[u8; 4]> = c.iter().map(|(k, _)| k).collect();
    assert_eq!(kinds, [b"IHDR", b"PLTE", b"IDAT", b"IEND"]);
    assert_eq!(c[0].1, [0, 0, 0, 3, 0, 0, 0, 2, 4, 3, 0, 0, 0]);
    assert_eq!(c[1].1, palette.concat());
    // Filter byte 0, then two pixels a byte; an odd row's last nibble is 0.
    let raw = [0, 0x01, 0x20, 0, 0x34, 0x50];
    let mut idat = vec![0x78, 0x01, 1, 6, 0, !6, 0xff];
    idat.extend_from_slice(&raw);
    idat.extend_from_slice(&adler32(&raw).to_be_bytes());
    assert_eq!(c[2].1, idat);
    assert!(c[3].1.is_empty());
}

#[test]
fn bad_images_are_refused() {
    let p = [[0, 0, 0], [1, 1, 1]];
    assert!(encode(2, 2, &p, &[0, 1, 0]).is_err());
    assert!(encode(0, 0, &p, &[]).is_err());
    assert!(encode(1, 1, &p, &[2]).is_err());
    assert!(encode(1, 1, &[[0, 0, 0]; 17], &[0]).is_err());
}

/// An independent decoder: Python's zlib inflates the stream and checks
/// its Adler-32, and computes each chunk's CRC. Skipped without python3.
#[test]
fn python_zlib_decodes_what_it_writes() {
    let python = std::path::Path::new("/usr/bin/python3");
    if !python.is_file() {
        eprintln!("no {}: skipped", python.display());
        return;
    }
    let (w, h) = (37u32, 2_000u32);
    let pixels: Vec<u8> = (0..w * h).map(|i| ((i * 7 + i / w) % 16) as u8).collect();
    let palette: Vec<[u8; 3]> = (0..16u8).map(|i| [i * 16, 255 - i, i]).collect();
    let png = encode(w, h, &palette, &pixels).expect("valid image");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("t.png");
    std::fs::write(&file, &png).expect("write");
    const SCRIPT: &str = r#"
import struct, sys, zlib
d = open(sys.argv[1], 'rb').read()
assert d[:8] == b'\x89PNG\r\n\x1a\n'
i, idat, w = 8, b'', 0
while i < len(d):
    n, = struct.unpack('>I', d[i:i+4]); kind = d[i+4:i+8]; body = d[i+8:i+8+n]
    assert struct.unpack('>I', d[i+8+n:i+12+n])[0] == zlib.crc32(kind + body), kind
    if kind == b'IHDR': w = struct.unpack('>I', body[:4])[0]
    if kind == b'IDAT': idat += body
    i += 12 + n
raw, row = zlib.decompress(idat), 1 + (w + 1) // 2
out = []
for r in range(len(raw) // row):
    line = raw[r*row:(r+1)*row]
    assert line[0] == 0
    px = [v for b in line[1:] for v in (b >> 4, b & 15)][:w]
    out.extend(px)
print(','.join(map(str, out)))
"#;
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(&file)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoded: Vec<u8> = String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(',')
        .map(|v| v.parse().expect("a number"))
        .collect();
    assert_eq!(decoded, pixels);
}
