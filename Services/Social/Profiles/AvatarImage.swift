import CImageScrub
import NIOCore
import NIOPosix
import ServiceKit

/// An avatar as it is stored: decoded and encoded again by libvips (through `CImageScrub`), upright,
/// in sRGB, with none of the metadata a phone writes into a photo (EXIF with the GPS position, the
/// camera, XMP, comments). An image whose header states a side over `maxSide`, or pixels over the
/// process's decoded-size budget (`IMAGE_DECODE_MAX_BYTES`, counting bit depth and channels: a
/// 16-bit RGBA PNG takes 8 bytes a pixel), is refused before any pixel is decoded: a small file can
/// state a size that takes gigabytes to decode.
///
/// Encoding again costs a little quality on JPEG and WebP (quality 90) and about 10 ms for a phone
/// photo; it also means what is served is an image libvips wrote, not bytes a client chose.
struct AvatarImage: Sendable {
    static let maxSide = 4096

    var bytes: ByteBuffer
    var width: Int
    var height: Int

    enum Problem: Error, Equatable {
        case unreadable(String)
        case tooLarge(width: Int, height: Int)
        case tooManyBytes(width: Int, height: Int, bytes: Int)
        case failed(String)
    }

    /// Blocking work, on NIO's thread pool (as bcrypt in auth), in one of the process's decode slots:
    /// none free is `503 image_busy` at once (`ImageDecoding`).
    static func scrub(_ input: ByteBuffer, format: ImageFormat, decoding: ImageDecoding) async throws -> AvatarImage {
        try await decoding.withSlot {
            try await NIOThreadPool.singleton.runIfActive { try scrubNow(input, format: format, maxBytes: decoding.maxDecodedBytes) }
        }
    }

    static func scrubNow(_ input: ByteBuffer, format: ImageFormat, maxBytes: Int = ImageDecoding.standardMaxDecodedBytes) throws(Problem) -> AvatarImage {
        let kind: image_scrub_format =
            switch format {
            case .jpeg: IMAGE_SCRUB_JPEG
            case .png: IMAGE_SCRUB_PNG
            case .webp: IMAGE_SCRUB_WEBP
            }
        var result = image_scrub_result()
        let status = input.withUnsafeReadableBytes { bytes in
            image_scrub(bytes.baseAddress, bytes.count, kind, Int32(maxSide), maxBytes, &result)
        }
        defer { image_scrub_free(result.data) }
        let reason = withUnsafeBytes(of: result.reason) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        switch status {
        case IMAGE_SCRUB_OK:
            let output = UnsafeRawBufferPointer(start: result.data, count: result.length)
            return AvatarImage(bytes: ByteBuffer(bytes: output), width: Int(result.width), height: Int(result.height))
        case IMAGE_SCRUB_TOO_LARGE:
            throw .tooLarge(width: Int(result.width), height: Int(result.height))
        case IMAGE_SCRUB_TOO_MANY_BYTES:
            throw .tooManyBytes(width: Int(result.width), height: Int(result.height), bytes: result.decoded_bytes)
        case IMAGE_SCRUB_UNREADABLE:
            throw .unreadable(reason)
        default:
            throw .failed(reason)
        }
    }
}
