import Foundation
import HTTPTypes
import NIOCore
import ServiceKitHTTP
@testable import Social
import Testing
import TestSupport

/// What decoding avatars may cost a process: a number of decodes at once (beyond it `503` at once),
/// and a number of bytes of pixels per image, counted from its header with its bit depth and
/// channels before any pixel is decoded.
@Suite struct AvatarDecodeLimitTests {
    /// 3000×3000 RGBA at 16 bits a channel: 72 MB decoded, over the 64 MiB budget, though each side
    /// is under 4096 and the file is 70 KB.
    @Test func aSixteenBitPNGIsCountedByItsDecodedSize() async throws {
        try await SocialTestEnvironment.run { env in
            let cook = try await env.user()
            let deep = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: ProfileTests.fixture("deep16.png")))
            #expect(deep.status == .unprocessableContent && deep.code == "image_too_large", "\(deep.text)")
            #expect(deep.text.contains("72000000 bytes") && deep.text.contains("67108864"), "\(deep.text)")
            #expect(deep.headers[.contentType] == "application/problem+json")
            // A smaller image of the same kind goes through.
            #expect(try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: ProfileTests.png)).status == .ok)
        }
        // The budget is a setting: the fixture's 72,000,000 bytes fit in 80 MB.
        try await SocialTestEnvironment.run(["IMAGE_DECODE_MAX_BYTES": "80000000"]) { env in
            let cook = try await env.user()
            let deep = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: ProfileTests.fixture("deep16.png")))
            #expect(deep.status == .ok, "\(deep.text)")
        }
    }

    /// With every decode slot taken (here by the test, as a long decode would), an upload is refused
    /// at once with `503 image_busy` and `Retry-After`, and goes through once a slot is free.
    @Test func anUploadBeyondTheDecodeSlotsIsRefusedAtOnce() async throws {
        let decoding = ImageDecoding(concurrency: 1)
        try await SocialTestEnvironment.run(imageDecoding: decoding) { env in
            let cook = try await env.user()
            try #require(decoding.take())
            let busy = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: ProfileTests.png))
            decoding.giveBack()
            #expect(busy.status == .serviceUnavailable && busy.code == "image_busy", "\(busy.text)")
            #expect(busy.headers[.retryAfter] == "1")
            #expect(try await env.call(.get, "/v1/profiles/me", as: cook).json["avatar_url"] is NSNull, "nothing was stored")
            let stored = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: ProfileTests.png))
            #expect(stored.status == .ok, "\(stored.text)")
            // The slot the upload took was given back.
            #expect(decoding.take())
            decoding.giveBack()
        }
        // IMAGE_DECODE_CONCURRENCY=0 decodes nothing.
        try await SocialTestEnvironment.run(["IMAGE_DECODE_CONCURRENCY": "0"]) { env in
            let cook = try await env.user()
            #expect(try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: ProfileTests.png)).code == "image_busy")
        }
    }
}
