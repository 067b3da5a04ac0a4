#!/usr/bin/env python3
"""make_grid.py SRC.heic OUT.heic ROWS COLS TILE_W TILE_H [shared|copies]

Builds a HEIC whose primary image is a ROWS x COLS 'grid' of hvc1 tiles, each tile being the
(single) HEVC image of SRC.heic (hvcC + bitstream copied verbatim), but with every tile's 'ispe'
stating TILE_W x TILE_H and the grid's 'ispe' and descriptor stating COLS*TILE_W x ROWS*TILE_H.
'shared': every tile's iloc points at the same bitstream bytes (tiny file); 'copies': one copy each."""
import struct, sys

def boxes(data, start, end):
    p = start
    while p < end:
        size, typ = struct.unpack('>I4s', data[p:p+8])
        hdr = 8
        if size == 1: size = struct.unpack('>Q', data[p+8:p+16])[0]; hdr = 16
        if size == 0: size = end - p
        yield typ.decode('latin1'), p, p + hdr, p + size
        p += size

def find(data, start, end, typ, full=False):
    for t, p, b, e in boxes(data, start, end):
        if t == typ: return p, (b + 4 if full else b), e
    raise KeyError(typ)

src = open(sys.argv[1], 'rb').read()
out, rows, cols, tw, th = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
mode = sys.argv[7] if len(sys.argv) > 7 else 'shared'

_, mb, me = find(src, 0, len(src), 'meta', full=True)
_, pb, pe = find(src, mb, me, 'iprp')
_, cb, ce = find(src, pb, pe, 'ipco')
hp, hb, he = find(src, cb, ce, 'hvcC')
hvcC = src[hp:he]
# iloc of the single hvc1 item (heif-enc 1.15 writes version 0/1, one item, one extent)
_, lb, le = find(src, mb, me, 'iloc', full=True)
ver = src[lb - 4]
osz, lsz = src[lb] >> 4, src[lb] & 15
bsz, isz = src[lb + 1] >> 4, src[lb + 1] & 15
p = lb + 2
cnt = struct.unpack('>H', src[p:p+2])[0]; p += 2
def rd(n):
    global p
    v = int.from_bytes(src[p:p+n], 'big') if n else 0; p += n; return v
extents = []
for _ in range(cnt):
    item = rd(2)
    if ver in (1, 2): rd(2)  # construction method
    rd(2)  # data ref
    base = rd(bsz)
    n = rd(2)
    for _ in range(n):
        if ver in (1, 2) and isz: rd(isz)
        off = rd(osz); ln = rd(lsz); extents.append((base + off, ln))
bitstream = b''.join(src[o:o+l] for o, l in extents)
print(f'source: hvcC {len(hvcC)} bytes, bitstream {len(bitstream)} bytes in {len(extents)} extent(s)')

def box(t, payload): return struct.pack('>I4s', 8 + len(payload), t.encode()) + payload
def fbox(t, v, f, payload): return box(t, struct.pack('>I', (v << 24) | f) + payload)

ntiles = rows * cols
GRID = 1
tiles = list(range(2, 2 + ntiles))
gw, gh = cols * tw, rows * th
import os as _o
if 'GRID_W' in _o.environ: gw, gh = int(_o.environ['GRID_W']), int(_o.environ['GRID_H'])
grid_desc = struct.pack('>BBBBHH', 0, 0, rows - 1, cols - 1, gw, gh) if gw < 65536 and gh < 65536 else \
            struct.pack('>BBBBII', 0, 1, rows - 1, cols - 1, gw, gh)

ftyp = box('ftyp', b'heic' + struct.pack('>I', 0) + b'mif1heicmiaf')
hdlr = fbox('hdlr', 0, 0, struct.pack('>I', 0) + b'pict' + b'\0' * 12 + b'\0')
pitm = fbox('pitm', 0, 0, struct.pack('>H', GRID))
infes = [fbox('infe', 2, 0, struct.pack('>HH', GRID, 0) + b'grid' + b'\0')]
infes += [fbox('infe', 2, 1, struct.pack('>HH', t, 0) + b'hvc1' + b'\0') for t in tiles]  # hidden tiles
iinf = fbox('iinf', 0, 0, struct.pack('>H', len(infes)) + b''.join(infes))
iref = fbox('iref', 0, 0, box('dimg', struct.pack('>HH', GRID, ntiles) + b''.join(struct.pack('>H', t) for t in tiles)))
ispe_tile = fbox('ispe', 0, 0, struct.pack('>II', tw, th))
import os
ispe_grid = fbox('ispe', 0, 0, struct.pack('>II', *( (int(os.environ['GRID_ISPE_W']), int(os.environ['GRID_ISPE_H'])) if 'GRID_ISPE_W' in os.environ else (gw, gh))))
ipco = box('ipco', hvcC + ispe_tile + ispe_grid)  # property indexes: 1 hvcC, 2 tile ispe, 3 grid ispe
ipma_entries = [struct.pack('>HB', GRID, 1) + bytes([3])]
ipma_entries += [struct.pack('>HB', t, 2) + bytes([0x81, 2]) for t in tiles]
ipma = fbox('ipma', 0, 0, struct.pack('>I', len(ipma_entries)) + b''.join(ipma_entries))
iprp = box('iprp', ipco + ipma)

def build(mdat_start):
    # mdat payload: grid descriptor, then bitstream(s)
    payload_start = mdat_start + 8
    items = [(GRID, payload_start, len(grid_desc))]
    bs_off = payload_start + len(grid_desc)
    for i, t in enumerate(tiles):
        off = bs_off if mode == 'shared' else bs_off + i * len(bitstream)
        items.append((t, off, len(bitstream)))
    body = struct.pack('>BBH', 0x44, 0x00, len(items))
    for it, off, ln in items:
        body += struct.pack('>HHHII', it, 0, 1, off, ln)
    iloc = fbox('iloc', 0, 0, body)
    meta = fbox('meta', 0, 0, hdlr + pitm + iinf + iref + iprp + iloc)
    return meta

meta = build(0)
mdat_start = len(ftyp) + len(meta)
meta = build(mdat_start)
assert len(ftyp) + len(meta) == mdat_start
mdat = box('mdat', grid_desc + (bitstream if mode == 'shared' else bitstream * ntiles))
open(out, 'wb').write(ftyp + meta + mdat)
print(f'wrote {out}: grid {rows}x{cols} of {tw}x{th} tiles = {gw}x{gh}, {ntiles} tiles ({mode}), {len(ftyp)+len(meta)+len(mdat)} bytes')
