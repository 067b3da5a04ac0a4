import CImageScrub
import NIOCore
import NIOPosix
import ServiceKitHTTP

/// An image as it is stored (avatars, meal photos): decoded and encoded again by libvips (through
/// `CImageScrub`), upright, in sRGB, with none of the metadata a phone writes into a photo (EXIF with
/// the GPS position, the camera, XMP, comments), optionally scaled down. An image whose header
/// states a side over `maxSide`, or pixels over the process's decoded-size budget
/// (`IMAGE_DECODE_MAX_BYTES`, counting bit depth and channels: a 16-bit RGBA PNG takes 8 bytes a
/// pixel), is refused before any pixel is decoded: a small file can state a size that takes
/// gigabytes to decode.
///
/// Encoding again costs a little quality on JPEG and WebP (quality 90); it also means what is served
/// is an image libvips wrote, not bytes a client chose.
public struct CleanImage: Sendable {
    public var bytes: ByteBuffer
    public var width: Int
    public var height: Int
    public var format: ImageFormat

    public enum Problem: Error, Equatable {
        case unreadable(String)
        case tooLarge(width: Int, height: Int)
        case tooManyBytes(width: Int, height: Int, bytes: Int)
        case failed(String)
    }

    /// Blocking work, on NIO's thread pool (as bcrypt in auth), in one of the process's decode slots:
    /// none free is `503 image_busy` at once (`ImageDecoding`). `maxLongSide` scales it down (never
    /// up); `output` is the format written (the input's by default; HEIC is read, never written).
    public static func clean(
        _ input: ByteBuffer, format: ImageFormat, maxSide: Int, maxLongSide: Int? = nil, output: ImageFormat? = nil, decoding: ImageDecoding
    ) async throws -> CleanImage {
        try await decoding.withSlot {
            try await NIOThreadPool.singleton.runIfActive {
                try cleanNow(input, format: format, maxSide: maxSide, maxBytes: decoding.maxDecodedBytes, maxLongSide: maxLongSide, output: output)
            }
        }
    }

    /// `compact`: a JPEG's Huffman tables made for the image (a smaller file, a second pass over it),
    /// for an image kept and served; a copy sent once goes without.
    public static func cleanNow(
        _ input: ByteBuffer, format: ImageFormat, maxSide: Int, maxBytes: Int = ImageDecoding.standardMaxDecodedBytes, maxLongSide: Int? = nil,
        output: ImageFormat? = nil, compact: Bool = true
    ) throws(Problem) -> CleanImage {
        let written = output ?? format
        guard written != .heic else { throw .failed("HEIC is read, never written") }
        var result = image_scrub_result()
        let status = input.withUnsafeReadableBytes { bytes in
            image_scrub_resized(bytes.baseAddress, bytes.count, format.scrubFormat, Int32(maxSide), maxBytes, Int32(maxLongSide ?? 0), written.scrubFormat, compact ? 1 : 0, &result)
        }
        defer { image_scrub_free(result.data) }
        switch status {
        case IMAGE_SCRUB_OK:
            let output = UnsafeRawBufferPointer(start: result.data, count: result.length)
            return CleanImage(bytes: ByteBuffer(bytes: output), width: Int(result.width), height: Int(result.height), format: written)
        case IMAGE_SCRUB_TOO_LARGE:
            throw .tooLarge(width: Int(result.width), height: Int(result.height))
        case IMAGE_SCRUB_TOO_MANY_BYTES:
            throw .tooManyBytes(width: Int(result.width), height: Int(result.height), bytes: result.decoded_bytes)
        case IMAGE_SCRUB_UNREADABLE:
            throw .unreadable(Self.reason(result))
        default:
            throw .failed(Self.reason(result))
        }
    }

    /// An image this process stored (so not checked again), scaled and cropped around its centre to
    /// fill `width`×`height` exactly, as a PNG: what the share card draws beside the meal. Blocking.
    public static func coverPNG(_ input: ByteBuffer, width: Int, height: Int) throws(Problem) -> [UInt8] {
        var result = image_scrub_result()
        let status = input.withUnsafeReadableBytes { bytes in
            image_scrub_cover_png(bytes.baseAddress, bytes.count, Int32(width), Int32(height), &result)
        }
        defer { image_scrub_free(result.data) }
        guard status == IMAGE_SCRUB_OK, let data = result.data else { throw .failed(Self.reason(result)) }
        return Array(UnsafeRawBufferPointer(start: data, count: result.length))
    }

    /// An image this process wrote, decoded to 8-bit sRGB: three bytes a pixel, row by row. What a
    /// check of drawn pixels reads. Blocking.
    public static func rgb(_ input: some Collection<UInt8>) throws(Problem) -> (width: Int, height: Int, pixels: [UInt8]) {
        var result = image_scrub_result()
        let bytes = Array(input)
        let status = bytes.withUnsafeBytes { image_scrub_rgb($0.baseAddress, $0.count, &result) }
        defer { image_scrub_free(result.data) }
        guard status == IMAGE_SCRUB_OK, let data = result.data else { throw .failed(Self.reason(result)) }
        return (Int(result.width), Int(result.height), Array(UnsafeRawBufferPointer(start: data, count: result.length)))
    }

    private static func reason(_ result: image_scrub_result) -> String {
        withUnsafeBytes(of: result.reason) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    }
}

extension ImageFormat {
    var scrubFormat: image_scrub_format {
        switch self {
        case .jpeg: IMAGE_SCRUB_JPEG
        case .png: IMAGE_SCRUB_PNG
        case .webp: IMAGE_SCRUB_WEBP
        case .heic: IMAGE_SCRUB_HEIF
        }
    }
}
