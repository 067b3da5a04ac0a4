/// The image formats an upload may be, told apart by their first bytes (the client's Content-Type is
/// not trusted).
public enum ImageFormat: String, Sendable, CaseIterable {
    case png = "image/png"
    case jpeg = "image/jpeg"
    case webp = "image/webp"
    /// HEIF with HEVC pictures, what an iPhone camera writes (`.heic`).
    case heic = "image/heic"

    public var name: String {
        switch self {
        case .png: "PNG"
        case .jpeg: "JPEG"
        case .webp: "WebP"
        case .heic: "HEIC"
        }
    }

    /// The ISO base media file brands of a HEIF image (ISO/IEC 23008-12): HEVC stills and sequences,
    /// and the generic image brands.
    static let heifBrands: Set<String> = ["heic", "heix", "heim", "heis", "hevc", "hevx", "hevm", "hevs", "mif1", "msf1"]

    public init?(sniffing bytes: some Collection<UInt8>) {
        let head = Array(bytes.prefix(12))
        if head.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) {
            self = .png
        } else if head.starts(with: [0xFF, 0xD8, 0xFF]) {
            self = .jpeg
        } else if head.count == 12, head.starts(with: Array("RIFF".utf8)), Array(head[8..<12]) == Array("WEBP".utf8) {
            self = .webp
        } else if head.count == 12, Array(head[4..<8]) == Array("ftyp".utf8), Self.heifBrands.contains(String(decoding: head[8..<12], as: UTF8.self)) {
            self = .heic
        } else {
            return nil
        }
    }
}
