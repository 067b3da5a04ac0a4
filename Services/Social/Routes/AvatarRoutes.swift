import Foundation
import HTTPTypes
import Hummingbird
import Images
import NIOCore
import PostgresNIO
import ServiceKit

struct AvatarRoutes {
    static let maxBytes = 2 * 1024 * 1024
    /// The longest side an avatar's header may state.
    static let maxSide = 4096
    /// The longest side an avatar is kept at: a phone's photo is scaled down to it, as every list of
    /// people shows avatars small, and a camera's full size would be megabytes in each row.
    static let storedLongSide = 1024

    let social: Social

    func add(to router: Router<ServiceRequestContext>) {
        let profiles = router.group("v1/profiles", context: AuthenticatedContext.self)
        profiles.put("me/avatar", use: upload)
        profiles.delete("me/avatar", use: remove)
        profiles.get(":id/avatar", use: image)
    }

    @Sendable func upload(_ request: Request, context: AuthenticatedContext) async throws -> ProfileView {
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: Self.maxBytes)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, code: "too_large", detail: "An avatar may be at most 2 MiB.")
        }
        // An avatar is stored in the format it came in; HEIC is read, never written.
        guard let format = ImageFormat(sniffing: body.readableBytesView), format != .heic else {
            throw APIError(.unsupportedMediaType, code: "unsupported_image", detail: "Send a PNG, JPEG or WebP image as the request body.")
        }
        let image: CleanImage
        do {
            image = try await CleanImage.clean(body, format: format, maxSide: Self.maxSide, maxLongSide: Self.storedLongSide, decoding: social.settings.imageDecoding)
        } catch CleanImage.Problem.tooLarge(let width, let height) {
            throw APIError(
                .unprocessableContent, code: "image_too_large",
                detail: "The image is \(width)×\(height) pixels; an avatar may be at most \(Self.maxSide)×\(Self.maxSide).")
        } catch CleanImage.Problem.tooManyBytes(let width, let height, let bytes) {
            let budget = social.settings.imageDecoding.maxDecodedBytes
            throw APIError(
                .unprocessableContent, code: "image_too_large",
                detail:
                    "The image is \(width)×\(height) pixels at its bit depth and channels, \(bytes) bytes decoded; an avatar may take at most \(budget) bytes decoded.")
        } catch CleanImage.Problem.unreadable {
            throw APIError(.unprocessableContent, code: "invalid_image", detail: "The body starts like a \(format.name) image but cannot be decoded as one.")
        }
        let social = self.social
        let caller = context.caller
        let profile = try await social.transaction(logger: context.logger) { connection in
            _ = try await social.ownProfile(caller, forUpdate: true, on: connection, logger: context.logger)
            try await social.profiles.setAvatar(caller.userID, contentType: format.rawValue, data: image.bytes, on: connection, logger: context.logger)
            let profile = try await social.ownProfile(caller, on: connection, logger: context.logger)
            try await social.announce(profile, on: connection, logger: context.logger)
            return profile
        }
        return social.view(profile, relationship: nil, for: caller)
    }

    @Sendable func remove(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let social = self.social
        let caller = context.caller
        try await social.transaction(logger: context.logger) { connection in
            let before = try await social.ownProfile(caller, forUpdate: true, on: connection, logger: context.logger)
            try await social.profiles.deleteAvatar(caller.userID, on: connection, logger: context.logger)
            if before.avatarETag != nil {
                try await social.announce(try await social.ownProfile(caller, on: connection, logger: context.logger), on: connection, logger: context.logger)
            }
        }
        return .noContent
    }

    /// The image, to whoever may see the profile. The ETag is a hash of the bytes: a client revalidates
    /// with `If-None-Match` and gets 304.
    @Sendable func image(_ request: Request, context: AuthenticatedContext) async throws -> Response {
        let id = try context.profileID()
        let social = self.social
        let avatar = try await social.postgres.withConnectionOnItsLoop { connection in
            _ = try await social.visibleProfile(id, to: context.caller, on: connection, logger: context.logger)
            return try await social.profiles.avatar(id, on: connection, logger: context.logger)
        }
        guard let avatar else { throw APIError.notFound("This profile has no avatar.") }
        let etag = "\"\(avatar.etag)\""
        var headers: HTTPFields = [.eTag: etag, .cacheControl: "private, max-age=86400"]
        // If-None-Match compares weakly (RFC 9110 13.1.2): `W/"x"` matches `"x"`, as do `*` and a list.
        let matches = request.headers[.ifNoneMatch]?.split(separator: ",").contains { candidate in
            let tag = candidate.trimmingCharacters(in: .whitespaces)
            return tag == "*" || (tag.hasPrefix("W/") ? String(tag.dropFirst(2)) : tag) == etag
        }
        if matches == true {
            return Response(status: .notModified, headers: headers)
        }
        headers[.contentType] = avatar.contentType
        // The type was judged from the bytes when the image was stored; a browser must not guess another.
        headers[.xContentTypeOptions] = "nosniff"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: avatar.data))
    }
}
