#!/usr/bin/env python3
"""make_layouts.py SMALL.heic SMALL10.heic BIG.heic OUTDIR: HEIF files laid out so that what
libheif 1.15 and libvips decode differs from what a plain reading of the boxes suggests. SMALL and
SMALL10 are heif-enc files of a flat 512 x 512 picture, of 8 and 10 bits; BIG is bomb8k-ispe64.heic
(one 8192 x 8192 picture stating 64 x 64).

  primary-is-thumbnail.heic  the primary item (SMALL) is the thumbnail of a top-level item (BIG),
                             which libvips decodes instead, since the primary is not top-level
  iloc-index-in-version1.heic  a grid whose iloc box is version 1 with an index size: libheif
                             reads no index there, so the grid's data it reads states an 8192 x 8192
                             canvas where the index-reading view sees 8192 x 8
  canvas-10bit.heic          a grid of one 10-bit tile, stating 8192 x 8, whose data states an
                             8192 x 4096 canvas, which libheif makes at two bytes a sample
  xmp-deflated.heic          SMALL with an XMP item stored deflated (1 MiB inflated)
  two-meta-boxes.heic        a plain `meta` box, then xmp-deflated's: libheif reads the last one
  iloc-extent-of-length-0.heic  a grid whose data comes in two extents, the first of length 0
                             (nothing, to libheif) where 8192 x 8 is written, the second stating an
                             8192 x 8192 canvas
  rotations-repeated.heic    SMALL associated with its `irot` 32 times: libheif turns it 32 times
  parameter-set-after-picture.heic  SMALL with its SPS sent again after its slice"""
import os, struct, sys, zlib
from heiflib import single_image, hvcc_nals, box, fbox

small_hvcc, small = single_image(open(sys.argv[1], 'rb').read())
small10_hvcc, small10 = single_image(open(sys.argv[2], 'rb').read())
big_hvcc, big = single_image(open(sys.argv[3], 'rb').read())
outdir = sys.argv[4]

ftyp = box('ftyp', b'heic' + struct.pack('>I', 0) + b'mif1heicmiaf')
hdlr = fbox('hdlr', 0, 0, struct.pack('>I', 0) + b'pict' + b'\0' * 13)
def ispe(w, h): return fbox('ispe', 0, 0, struct.pack('>II', w, h))
def pitm(i): return fbox('pitm', 0, 0, struct.pack('>H', i))
def infe(i, kind, hidden=0, extra=b''): return fbox('infe', 2, hidden, struct.pack('>HH', i, 0) + kind + b'\0' + extra)
def iinf(*infes): return fbox('iinf', 0, 0, struct.pack('>H', len(infes)) + b''.join(infes))
def ref(kind, source, *to): return box(kind, struct.pack('>HH', source, len(to)) + b''.join(struct.pack('>H', t) for t in to))
def iprp(props, assoc):
    """props: property boxes (indexes from 1); assoc: [(item, [index, ...])], every one essential."""
    ipma = fbox('ipma', 0, 0, struct.pack('>I', len(assoc)) + b''.join(
        struct.pack('>HB', item, len(ix)) + bytes(0x80 | i for i in ix) for item, ix in assoc))
    return box('iprp', box('ipco', b''.join(props)) + ipma)

def write(name, boxes_before_iloc, items, iloc_version=0, iloc_sizes=0x4400):
    """items: [(id, data)], each one extent in mdat; items of the same data share its bytes."""
    chunks = list(dict.fromkeys(d for _, d in items))
    def meta(start):
        body = struct.pack('>HH', iloc_sizes, len(items))
        for item, data in items:
            at = start + 8 + sum(len(c) for c in chunks[:chunks.index(data)])
            body += struct.pack('>HH', item, 0) if iloc_version else struct.pack('>H', item)
            body += struct.pack('>HHII', 0, 1, at, len(data))
        return fbox('meta', 0, 0, hdlr + boxes_before_iloc + fbox('iloc', iloc_version, 0, body))
    m = meta(0)
    m = meta(len(ftyp) + len(m))
    blob = ftyp + m + box('mdat', b''.join(chunks))
    open(os.path.join(outdir, name), 'wb').write(blob)
    print(name, len(blob), 'bytes')

# 1: big (id 1, top-level) and small (id 2, primary), small a thumbnail of big.
write('primary-is-thumbnail.heic',
      pitm(2) + iinf(infe(1, b'hvc1'), infe(2, b'hvc1')) + fbox('iref', 0, 0, ref('thmb', 2, 1)) +
      iprp([big_hvcc, ispe(64, 64), small_hvcc, ispe(512, 512)], [(1, [1, 2]), (2, [3, 4])]),
      [(1, big), (2, small)])

# 2: a grid (id 1) of one tile (id 2). The iloc is version 1 with a 4-byte index: libheif reads
# item 1 at `real` (offset M + 8, length M); a reader taking the index sees offset M, at `fake`.
# The tile sits at 0x10000, so that the misread item 2 has no extents.
def iloc_index():
    tile_at = 0x10000
    real = struct.pack('>BBBBHH', 0, 0, 0, 0, 8192, 8192)
    fake = struct.pack('>BBBBHH', 0, 0, 0, 0, 8192, 8)
    head = pitm(1) + iinf(infe(1, b'grid'), infe(2, b'hvc1', hidden=1)) + fbox('iref', 0, 0, ref('dimg', 1, 2)) + \
        iprp([small_hvcc, ispe(512, 512), ispe(8192, 8)], [(1, [3]), (2, [1, 2])])
    def meta(m):
        body = struct.pack('>HH', 0x4404, 2)
        body += struct.pack('>HHHHII', 1, 0, 0, 1, m + 8, m)
        body += struct.pack('>HHHHII', 2, 0, 0, 1, tile_at, len(small))
        return fbox('meta', 0, 0, hdlr + head + fbox('iloc', 1, 0, body))
    m = meta(0)
    payload_at = len(ftyp) + len(m) + 8
    m = meta(payload_at)
    payload = fake + real
    payload += b'\0' * (tile_at - payload_at - len(payload)) + small
    blob = ftyp + m + box('mdat', payload)
    open(os.path.join(outdir, 'iloc-index-in-version1.heic'), 'wb').write(blob)
    print('iloc-index-in-version1.heic', len(blob), 'bytes')
iloc_index()

# 3: a grid of one 10-bit tile whose own data states an 8192 x 4096 canvas (its ispe 8192 x 8):
# three bytes a pixel, that canvas is the whole budget; libheif makes it at two bytes a sample.
write('canvas-10bit.heic',
      pitm(1) + iinf(infe(1, b'grid'), infe(2, b'hvc1', hidden=1)) + fbox('iref', 0, 0, ref('dimg', 1, 2)) +
      iprp([small10_hvcc, ispe(512, 512), ispe(8192, 8)], [(1, [3]), (2, [1, 2])]),
      [(1, struct.pack('>BBBBHH', 0, 0, 0, 0, 8192, 4096)), (2, small10)])

# 4: small, with a deflated XMP item describing it.
xmp = zlib.compress(b'<x:xmpmeta xmlns:x="adobe:ns:meta/">' + b' ' * (1 << 20) + b'</x:xmpmeta>', 9)
write('xmp-deflated.heic',
      pitm(1) + iinf(infe(1, b'hvc1'), infe(2, b'mime', extra=b'application/rdf+xml\0deflate\0')) +
      fbox('iref', 0, 0, ref('cdsc', 2, 1)) + iprp([small_hvcc, ispe(512, 512)], [(1, [1, 2])]),
      [(1, small), (2, xmp)])

# 5: a plain meta box (SMALL's), then the meta box of xmp-deflated.heic, then their data.
def metas(name, first, second):
    blob = bytearray(open(os.path.join(outdir, second), 'rb').read())
    plain = open(first, 'rb').read()
    def top(data):
        at = 0
        while at < len(data):
            size, kind = struct.unpack('>I4s', data[at:at + 8])
            yield kind, at, at + size
            at += size
    _, start, end = next(t for t in top(plain) if t[0] == b'meta')
    decoy = plain[start:end]
    _, at, _ = next(t for t in top(blob) if t[0] == b'meta')
    # Both meta boxes' iloc offsets point into the file: the second's move by the decoy's length.
    def shift(meta_box, by):
        out = bytearray(meta_box)
        i = out.find(b'iloc')
        version, sizes, count = out[i + 4], struct.unpack('>H', out[i + 8:i + 10])[0], struct.unpack('>H', out[i + 10:i + 12])[0]
        assert sizes == 0x4400 and version == 0
        p = i + 12
        for _ in range(count):
            p += 6  # item id, data reference, extent count (one extent each)
            off = struct.unpack('>I', out[p:p + 4])[0]
            out[p:p + 4] = struct.pack('>I', off + by)
            p += 8
        return bytes(out)
    _, second_at, second_end = next(t for t in top(blob) if t[0] == b'meta')
    second_meta = shift(blob[second_at:second_end], len(decoy))
    data = bytes(blob[:at]) + decoy + second_meta + bytes(blob[second_end:])
    open(os.path.join(outdir, name), 'wb').write(data)
    print(name, len(data), 'bytes')
metas('two-meta-boxes.heic', sys.argv[1], 'xmp-deflated.heic')

# 6: a grid of one 512 x 512 tile, its ispe 8192 x 8; its data two extents: 0 bytes at `fake`,
# then 8 at `real`.
def extent0():
    fake = struct.pack('>BBBBHH', 0, 0, 0, 0, 8192, 8)
    real = struct.pack('>BBBBHH', 0, 0, 0, 0, 8192, 8192)
    head = pitm(1) + iinf(infe(1, b'grid'), infe(2, b'hvc1', hidden=1)) + fbox('iref', 0, 0, ref('dimg', 1, 2)) + \
        iprp([small_hvcc, ispe(512, 512), ispe(8192, 8)], [(1, [3]), (2, [1, 2])])
    def meta(at):
        body = struct.pack('>HH', 0x4400, 2)
        body += struct.pack('>HHHIIII', 1, 0, 2, at, 0, at + 8, 8)
        body += struct.pack('>HHHII', 2, 0, 1, at + 16, len(small))
        return fbox('meta', 0, 0, hdlr + head + fbox('iloc', 0, 0, body))
    m = meta(0)
    m = meta(len(ftyp) + len(m) + 8)
    blob = ftyp + m + box('mdat', fake + real + small)
    open(os.path.join(outdir, 'iloc-extent-of-length-0.heic'), 'wb').write(blob)
    print('iloc-extent-of-length-0.heic', len(blob), 'bytes')
extent0()

# 7: SMALL, its irot (a quarter turn) associated 32 times.
write('rotations-repeated.heic',
      pitm(1) + iinf(infe(1, b'hvc1')) + iprp([small_hvcc, ispe(512, 512), box('irot', bytes([1]))], [(1, [1, 2] + [3] * 32)]),
      [(1, small)])

# 8: SMALL, its SPS again after its slice, in the item's data.
sps = next(n for n in hvcc_nals(small_hvcc) if (n[0] >> 1) & 0x3f == 33)
write('parameter-set-after-picture.heic',
      pitm(1) + iinf(infe(1, b'hvc1')) + iprp([small_hvcc, ispe(512, 512)], [(1, [1, 2])]),
      [(1, small + struct.pack('>I', len(sps)) + sps)])
