#!/usr/bin/env python3
"""patch_ispe.py IN OUT W H [which]: rewrite the width/height of 'ispe' boxes.
which: 'all' (default), or a comma list of 0-based indexes of ispe boxes in file order."""
import struct, sys
src, dst, w, h = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
which = sys.argv[5] if len(sys.argv) > 5 else 'all'
data = bytearray(open(src, 'rb').read())
pos, idx, n = 0, 0, 0
while True:
    i = data.find(b'ispe', pos)
    if i < 0: break
    size = struct.unpack('>I', data[i-4:i])[0]
    assert size == 20, size   # size(4) 'ispe'(4) version/flags(4) w(4) h(4)
    ow, oh = struct.unpack('>II', data[i+8:i+16])
    if which == 'all' or str(idx) in which.split(','):
        data[i+8:i+16] = struct.pack('>II', w, h); n += 1
        print(f'ispe #{idx} at {i-4}: {ow}x{oh} -> {w}x{h}')
    else:
        print(f'ispe #{idx} at {i-4}: {ow}x{oh} (kept)')
    idx += 1; pos = i + 4
open(dst, 'wb').write(data)
