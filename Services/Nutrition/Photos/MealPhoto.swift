import Foundation
import HTTPTypes
import Hummingbird
import Images
import NIOCore
import NIOPosix
import ServiceKit

/// A meal photo as uploaded and as kept: read from the request (the body as `image/*`, or a
/// `multipart/form-data` field `photo`), told apart by its first bytes (JPEG, PNG, WebP, HEIC), and
/// cleaned as avatars are (upright, sRGB, no metadata) into a JPEG at most `storedLongSide` pixels
/// on its long side.
enum MealPhoto {
    /// The longest side a header may state; a larger image is refused before any pixel is decoded.
    static let maxSide = 8192
    /// The stored photo's longest side.
    static let storedLongSide = 2048
    /// The copy a vision model is sent: enough to tell foods apart, a quarter of the pixels.
    static let modelLongSide = 1024
    /// Room for a multipart body's other fields and boundaries beyond the photo itself.
    static let formAllowance = 16 * 1024

    static let accepted = ImageFormat.allCases.map(\.rawValue).joined(separator: ", ")

    static func unsupported() -> APIError {
        APIError(
            .unsupportedMediaType, code: "unsupported_image",
            detail: "Send a JPEG, PNG, WebP or HEIC photo (\(accepted)), as the body or as the multipart field `photo`.")
    }

    static func tooLarge(_ maxBytes: Int) -> APIError {
        APIError(.contentTooLarge, code: "too_large", detail: "A photo may be at most \(maxBytes) bytes (MEAL_PHOTO_MAX_BYTES).")
    }

    /// What a request carried: the photo, and the multipart form when it was one.
    struct Upload: Sendable {
        var photo: ByteBuffer
        var form: MultipartForm?
    }

    /// Reads the upload. A `Content-Length` over the limit is `413` before any of the body is read;
    /// a body without one that grows past it, `413` as soon as it does.
    static func read(_ request: Request, maxBytes: Int, multipartOnly: Bool = false) async throws -> Upload {
        let contentType = request.headers[.contentType] ?? ""
        let boundary = MultipartForm.boundary(of: contentType)
        let limit = boundary == nil ? maxBytes : maxBytes + formAllowance
        if let length = request.headers[.contentLength].flatMap(Int.init), length > limit { throw tooLarge(maxBytes) }
        if boundary == nil, multipartOnly {
            throw APIError(
                .unsupportedMediaType, code: "unsupported_media_type", detail: "Send multipart/form-data with the photo in the field `photo`.")
        }
        if boundary == nil, !contentType.isEmpty, !contentType.lowercased().hasPrefix("image/"), !contentType.lowercased().hasPrefix("application/octet-stream") {
            throw unsupported()
        }
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: limit)
        } catch is NIOTooManyBytesError {
            throw tooLarge(maxBytes)
        }
        guard let boundary else { return Upload(photo: body, form: nil) }
        let form: MultipartForm
        do {
            form = try MultipartForm(body, boundary: boundary)
        } catch {
            throw APIError.badRequest("The multipart body cannot be read: \(error).", code: "malformed_multipart")
        }
        guard let photo = form.first("photo")?.body, photo.readableBytes > 0 else {
            throw APIError.validation([.init(field: "photo", message: "is required: the photo as a file field")])
        }
        if photo.readableBytes > maxBytes { throw tooLarge(maxBytes) }
        return Upload(photo: photo, form: form)
    }

    /// The photo cleaned for keeping (a JPEG), in one of the process's decode slots.
    static func clean(_ photo: ByteBuffer, decoding: ImageDecoding) async throws -> CleanImage {
        guard let format = ImageFormat(sniffing: photo.readableBytesView) else { throw unsupported() }
        do {
            return try await CleanImage.clean(photo, format: format, maxSide: maxSide, maxLongSide: storedLongSide, output: .jpeg, decoding: decoding)
        } catch let problem as CleanImage.Problem {
            throw Self.problem(problem, format: format, decoding: decoding)
        }
    }

    static func problem(_ problem: CleanImage.Problem, format: ImageFormat, decoding: ImageDecoding) -> APIError {
        switch problem {
        case .tooLarge(let width, let height):
            return APIError(
                .unprocessableContent, code: "image_too_large", detail: "The image is \(width)×\(height) pixels; a photo may be at most \(maxSide)×\(maxSide).")
        case .tooManyBytes(let width, let height, let bytes):
            return APIError(
                .unprocessableContent, code: "image_too_large",
                detail: "The image is \(width)×\(height) pixels, \(bytes) bytes decoded; a photo may take at most \(decoding.maxDecodedBytes) bytes decoded.")
        case .unreadable, .failed:
            return APIError(.unprocessableContent, code: "invalid_image", detail: "The body starts like a \(format.name) image but cannot be decoded as one.")
        }
    }

    /// `GET` of a stored photo: `ETag` of its bytes, `If-None-Match` answered `304`.
    static func response(_ photo: (data: ByteBuffer, contentType: String, etag: String), cacheControl: String, request: Request) -> Response {
        let etag = "\"\(photo.etag)\""
        var headers: HTTPFields = [.eTag: etag, .cacheControl: cacheControl]
        // If-None-Match compares weakly (RFC 9110 13.1.2): `W/"x"` matches `"x"`, as do `*` and a list.
        let matches = request.headers[.ifNoneMatch]?.split(separator: ",").contains { candidate in
            let tag = candidate.trimmingCharacters(in: .whitespaces)
            return tag == "*" || (tag.hasPrefix("W/") ? String(tag.dropFirst(2)) : tag) == etag
        }
        if matches == true { return Response(status: .notModified, headers: headers) }
        headers[.contentType] = photo.contentType
        // The type is the one libvips wrote; a browser must not guess another.
        headers[.xContentTypeOptions] = "nosniff"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: photo.data))
    }
}

extension MealPhoto {
    /// The photo cleaned for keeping, and the smaller copy a vision model is sent (made from the
    /// kept one, so it is as clean), in one decode slot.
    static func cleanForAnalysis(_ photo: ByteBuffer, format: ImageFormat, decoding: ImageDecoding) async throws -> (stored: CleanImage, model: CleanImage) {
        do {
            return try await decoding.withSlot {
                try await NIOThreadPool.singleton.runIfActive {
                    let stored = try CleanImage.cleanNow(
                        photo, format: format, maxSide: maxSide, maxBytes: decoding.maxDecodedBytes, maxLongSide: storedLongSide, output: .jpeg)
                    let model = try CleanImage.cleanNow(stored.bytes, format: .jpeg, maxSide: maxSide, maxBytes: decoding.maxDecodedBytes, maxLongSide: modelLongSide, compact: false)
                    return (stored, model)
                }
            }
        } catch let problem as CleanImage.Problem {
            throw Self.problem(problem, format: format, decoding: decoding)
        }
    }
}
