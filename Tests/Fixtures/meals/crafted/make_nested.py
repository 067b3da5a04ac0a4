#!/usr/bin/env python3
"""make_nested.py TILE.heic OUT N SUB_W SUB_H: primary grid (1 x N, ispe N*8 x 8) whose N tiles are
grid items each stating ispe 8x8 but a SUB_W x SUB_H canvas in their descriptor, each made of one
hvc1 tile (TILE's bitstream, shared)."""
import struct, sys
from heiflib import single_image, box, fbox
hvcc, bs = single_image(open(sys.argv[1], 'rb').read())
out, N, SW, SH = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
TOP, HV = 1, 2
subs = list(range(3, 3 + N))
ftyp = box('ftyp', b'heic' + struct.pack('>I', 0) + b'mif1heicmiaf')
hdlr = fbox('hdlr', 0, 0, struct.pack('>I', 0) + b'pict' + b'\0' * 13)
pitm = fbox('pitm', 0, 0, struct.pack('>H', TOP))
infes = [fbox('infe', 2, 0, struct.pack('>HH', TOP, 0) + b'grid\0'), fbox('infe', 2, 1, struct.pack('>HH', HV, 0) + b'hvc1\0')]
infes += [fbox('infe', 2, 1, struct.pack('>HH', s, 0) + b'grid\0') for s in subs]
iinf = fbox('iinf', 0, 0, struct.pack('>H', len(infes)) + b''.join(infes))
refs = box('dimg', struct.pack('>HH', TOP, N) + b''.join(struct.pack('>H', s) for s in subs))
refs += b''.join(box('dimg', struct.pack('>HHH', s, 1, HV)) for s in subs)
iref = fbox('iref', 0, 0, refs)
ipco = box('ipco', hvcc + fbox('ispe', 0, 0, struct.pack('>II', 8, 8)) + fbox('ispe', 0, 0, struct.pack('>II', int(__import__('os').environ.get('TOP_W', 8 * (N // int(__import__('os').environ.get('ROWS', 1))))), 8 * int(__import__('os').environ.get('ROWS', 1)))))
ents = [struct.pack('>HB', TOP, 1) + bytes([3]), struct.pack('>HB', HV, 2) + bytes([0x81, 2])]
ents += [struct.pack('>HB', s, 1) + bytes([2]) for s in subs]
ipma = fbox('ipma', 0, 0, struct.pack('>I', len(ents)) + b''.join(ents))
iprp = box('iprp', ipco + ipma)
import os
TW = int(os.environ.get('TOP_W', 8 * N))
R = int(os.environ.get('ROWS', 1)); C = N // R
top_desc = struct.pack('>BBBBHH', 0, 0, R - 1, C - 1, int(os.environ.get('TOP_W', 8 * C)), 8 * R)
sub_desc = struct.pack('>BBBBHH', 0, 0, 0, 0, SW, SH)
def meta(start):
    p = start + 8
    items = [(TOP, p, len(top_desc)), (HV, p + len(top_desc), len(bs))]
    sp = p + len(top_desc) + len(bs)
    items += [(s, sp, len(sub_desc)) for s in subs]
    body = struct.pack('>BBH', 0x44, 0, len(items)) + b''.join(struct.pack('>HHHII', i, 0, 1, o, l) for i, o, l in items)
    return fbox('meta', 0, 0, hdlr + pitm + iinf + iref + iprp + fbox('iloc', 0, 0, body))
m = meta(0); m = meta(len(ftyp) + len(m))
blob = ftyp + m + box('mdat', top_desc + bs + sub_desc)
open(out, 'wb').write(blob); print(f'wrote {out}: {N} nested {SW}x{SH} canvases, {len(blob)} bytes')
