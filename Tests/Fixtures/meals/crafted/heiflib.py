import struct
def boxes(data, start, end):
    p = start
    while p < end:
        size, typ = struct.unpack('>I4s', data[p:p+8]); hdr = 8
        if size == 1: size = struct.unpack('>Q', data[p+8:p+16])[0]; hdr = 16
        if size == 0: size = end - p
        yield typ.decode('latin1'), p, p + hdr, p + size
        p += size
def find(data, start, end, typ, full=False):
    for t, p, b, e in boxes(data, start, end):
        if t == typ: return p, (b + 4 if full else b), e
    raise KeyError(typ)
def single_image(src):
    """(hvcC box bytes, item bitstream) of a heif-enc single-image file."""
    _, mb, me = find(src, 0, len(src), 'meta', full=True)
    _, pb, pe = find(src, mb, me, 'iprp')
    _, cb, ce = find(src, pb, pe, 'ipco')
    hp, hb, he = find(src, cb, ce, 'hvcC')
    _, lb, le = find(src, mb, me, 'iloc', full=True)
    ver = src[lb - 4]; osz, lsz = src[lb] >> 4, src[lb] & 15; bsz, isz = src[lb+1] >> 4, src[lb+1] & 15
    p = [lb + 2]
    def rd(n):
        v = int.from_bytes(src[p[0]:p[0]+n], 'big') if n else 0; p[0] += n; return v
    ext = []
    for _ in range(rd(2)):
        rd(2)
        if ver in (1, 2): rd(2)
        rd(2); base = rd(bsz)
        for _ in range(rd(2)):
            if ver in (1, 2) and isz: rd(isz)
            off = rd(osz); ln = rd(lsz); ext.append((base + off, ln))
    return src[hp:he], b''.join(src[o:o+l] for o, l in ext)
def hvcc_nals(hvcc_box):
    d = hvcc_box[8:]; n = d[22]; p = 23; out = []
    for _ in range(n):
        p += 1; cnt = struct.unpack('>H', d[p:p+2])[0]; p += 2
        for _ in range(cnt):
            ln = struct.unpack('>H', d[p:p+2])[0]; p += 2; out.append(d[p:p+ln]); p += ln
    return out
def box(t, payload): return struct.pack('>I4s', 8 + len(payload), t.encode()) + payload
def fbox(t, v, f, payload): return box(t, struct.pack('>I', (v << 24) | f) + payload)
def write_single(out, hvcc, ispe_w, ispe_h, data):
    ftyp = box('ftyp', b'heic' + struct.pack('>I', 0) + b'mif1heicmiaf')
    hdlr = fbox('hdlr', 0, 0, struct.pack('>I', 0) + b'pict' + b'\0' * 12 + b'\0')
    pitm = fbox('pitm', 0, 0, struct.pack('>H', 1))
    iinf = fbox('iinf', 0, 0, struct.pack('>H', 1) + fbox('infe', 2, 0, struct.pack('>HH', 1, 0) + b'hvc1\0'))
    ipco = box('ipco', hvcc + fbox('ispe', 0, 0, struct.pack('>II', ispe_w, ispe_h)))
    ipma = fbox('ipma', 0, 0, struct.pack('>IHB', 1, 1, 2) + bytes([0x81, 2]))
    iprp = box('iprp', ipco + ipma)
    def meta(off):
        iloc = fbox('iloc', 0, 0, struct.pack('>BBH', 0x44, 0, 1) + struct.pack('>HHHII', 1, 0, 1, off, len(data)))
        return fbox('meta', 0, 0, hdlr + pitm + iinf + iprp + iloc)
    m = meta(0); start = len(ftyp) + len(m) + 8; m = meta(start)
    blob = ftyp + m + box('mdat', data)
    open(out, 'wb').write(blob); return len(blob)
