import Foundation
import HTTPTypes
import Images
import Models
import NIOCore
@testable import Nutrition
import ServiceKit
import Testing
import TestSupport

/// Meal photos through HTTP: each accepted type comes back as a clean JPEG (upright, no metadata,
/// at most 2048 pixels on its long side), the refusals, who may read a photo, and what deletes it.
@Suite struct MealPhotoTests {
    static let formats: [(String, String)] = [
        ("avatars/photo.jpg", "image/jpeg"), ("avatars/photo.png", "image/png"), ("avatars/photo.webp", "image/webp"), ("meals/plate.heic", "image/heic"),
    ]

    @Test(arguments: formats)
    func eachTypeIsKeptCleanAsJPEG(_ fixture: String, _ type: String) async throws {
        try await NutritionTestEnvironment.run { env in
            let user = try await env.user()
            let meal = try await env.meal(user)
            let id = try #require(meal["id"] as? String)
            let original = try Photos.fixture(fixture)
            let upload = try await env.call(.post, "/v1/meals/\(id)/photo", as: user, raw: ByteBuffer(bytes: original), headers: [.contentType: type])
            #expect(upload.status == .ok, "\(upload.text)")
            #expect(upload.json["photo_url"] as? String == "/v1/meals/\(id)/photo")

            let photo = try await env.call(.get, "/v1/meals/\(id)/photo", as: user)
            #expect(photo.status == .ok)
            #expect(photo.headers[.contentType] == "image/jpeg")
            #expect(photo.headers[.cacheControl]?.hasPrefix("private") == true)
            #expect(photo.headers[.eTag] != nil)
            let stored = Array(buffer: photo.body)
            #expect(stored.starts(with: [0xFF, 0xD8, 0xFF]))
            #expect(Photos.jpegMetadataMarkers(stored).isEmpty, "no EXIF, XMP, ICC, IPTC or comment segment")
            for secret in ["Exif", "GPS", "iPhone", "Apple", "EvilCam", "secret"] { #expect(!Photos.contains(stored, secret), "\(secret) is gone") }
            let size = try #require(Photos.jpegSize(stored))
            switch fixture {
            case "meals/plate.heic":
                // The source says where and with what it was taken; the photo kept does not.
                #expect(Photos.contains(original, "iPhone 15 Pro"))
                #expect(size.width == 2048 && size.height == 1536, "scaled to 2048 on its long side: \(size)")
                // The pixels are the plate's: the white disc in the middle, the warm edge.
                let pixels = try CleanImage.rgb(stored)
                #expect(Photos.close(Photos.mean(pixels, x: 1000..<1010, y: 300..<310), (240, 240, 235), within: 8))
                #expect(Photos.close(Photos.mean(pixels, x: 10..<20, y: 10..<20), (200, 120, 60), within: 8))
            default:
                // 64×48 stored turned, EXIF orientation 6: kept upright.
                #expect(size.width == 48 && size.height == 64, "turned upright: \(size)")
            }
        }
    }

    /// The photo a current iPhone takes by default, 24 megapixels (5712 × 4284), is taken as JPEG and
    /// as HEIC and kept at 2048 pixels on its long side: the HEIC decodes whole (73 MB, within the
    /// default budget), the JPEG at half its sides, and only that is counted against the budget.
    @Test func aTwentyFourMegapixelPhoneShotIsTaken() async throws {
        try await NutritionTestEnvironment.run { env in
            let user = try await env.user()
            for (fixture, type) in [("meals/plate24.jpg", "image/jpeg"), ("meals/plate24.heic", "image/heic")] {
                let id = try #require(try await env.meal(user)["id"] as? String)
                let upload = try await env.call(.post, "/v1/meals/\(id)/photo", as: user, raw: ByteBuffer(bytes: try Photos.fixture(fixture)), headers: [.contentType: type])
                #expect(upload.status == .ok, "\(fixture): \(upload.text)")
                let stored = Array(buffer: try await env.call(.get, "/v1/meals/\(id)/photo", as: user).body)
                let size = try #require(Photos.jpegSize(stored))
                #expect(size.width == 2048 && size.height == 1536, "\(fixture): \(size)")
                let pixels = try CleanImage.rgb(stored)
                #expect(Photos.close(Photos.mean(pixels, x: 1000..<1010, y: 300..<310), (240, 240, 235), within: 8), "\(fixture): the plate")
            }
        }
        // With a budget of 24 MiB, the JPEG (decoded at 2856 × 2142, 18 MB) still goes through and the
        // HEIC, which has no smaller decode, is refused before decoding.
        try await NutritionTestEnvironment.run(["IMAGE_DECODE_MAX_BYTES": "\(24 << 20)"]) { env in
            let user = try await env.user()
            let id = try #require(try await env.meal(user)["id"] as? String)
            let jpeg = try await env.call(.post, "/v1/meals/\(id)/photo", as: user, raw: ByteBuffer(bytes: try Photos.fixture("meals/plate24.jpg")), headers: [.contentType: "image/jpeg"])
            #expect(jpeg.status == .ok, "\(jpeg.text)")
            let heic = try await env.call(.post, "/v1/meals/\(id)/photo", as: user, raw: ByteBuffer(bytes: try Photos.fixture("meals/plate24.heic")), headers: [.contentType: "image/heic"])
            #expect(heic.status == .unprocessableContent && heic.code == "image_too_large", "\(heic.text)")
            #expect(heic.text.contains("5712×4284") && heic.text.contains("\(24 << 20)"), "\(heic.text)")
            // A progressive JPEG is decoded through every coefficient of the whole image, two bytes a
            // sample, whatever the scale: 3712 × 2784 counts 62 MB, not the 8 MB it is written at.
            let progressiveJPEG = try Photos.fixture("meals/plate-progressive.jpg")
            let progressive = try await env.call(
                .post, "/v1/meals/\(id)/photo", as: user, raw: ByteBuffer(bytes: progressiveJPEG), headers: [.contentType: "image/jpeg"])
            #expect(progressive.status == .unprocessableContent && progressive.code == "image_too_large", "\(progressive.text)")
            #expect(progressive.text.contains("62005248 bytes"), "\(progressive.text)")
            // The same file behind a restart marker, which has no length and which libjpeg passes over,
            // and a comment whose bytes, were the marker read as having a length, would be an end of
            // image: the frame is found all the same.
            var disguised: [UInt8] = [0xFF, 0xD8, 0xFF, 0xD0, 0xFF, 0xFE, 0xFF, 0xFF]
            var comment = [UInt8](repeating: 0, count: 0xFFFF - 2)
            (comment[65_538 - 8], comment[65_539 - 8]) = (0xFF, 0xD9)
            disguised += comment + progressiveJPEG.dropFirst(2)
            // Or behind a stuffed zero, which libjpeg skips between segments, and a comment holding
            // an end of image, were the zero read as a marker with a length.
            let stuffed: [UInt8] = [0xFF, 0xD8, 0xFF, 0x00, 0x00, 0x06, 0xFF, 0xFE, 0x00, 0x04, 0xFF, 0xD9] + progressiveJPEG.dropFirst(2)
            for file in [disguised, stuffed] {
                let hidden = try await env.call(.post, "/v1/meals/\(id)/photo", as: user, raw: ByteBuffer(bytes: file), headers: [.contentType: "image/jpeg"])
                #expect(hidden.status == .unprocessableContent && hidden.code == "image_too_large", "\(hidden.text)")
                #expect(hidden.text.contains("62005248 bytes"), "\(hidden.text)")
            }
        }
    }

    @Test func multipartUploadIsTheSame() async throws {
        try await NutritionTestEnvironment.run { env in
            let user = try await env.user()
            let id = try #require(try await env.meal(user)["id"] as? String)
            let (body, headers) = Photos.form(photo: try Photos.fixture("meals/plate.heic"))
            let upload = try await env.call(.post, "/v1/meals/\(id)/photo", as: user, raw: body, headers: headers)
            #expect(upload.status == .ok, "\(upload.text)")
            let photo = try await env.call(.get, "/v1/meals/\(id)/photo", as: user)
            #expect(Photos.jpegSize(Array(buffer: photo.body)).map { [$0.width, $0.height] } == [2048, 1536])
            // Without the field `photo`: which field is missing, said.
            let (empty, emptyHeaders) = Photos.form(photo: nil, fields: [("hint", "no dressing")])
            let missing = try await env.call(.post, "/v1/meals/\(id)/photo", as: user, raw: empty, headers: emptyHeaders)
            #expect(missing.status == .badRequest)
            #expect(missing.code == "validation_failed")
            #expect(missing.fieldErrors == ["photo"])
            let (broken, brokenHeaders) = (ByteBuffer(string: "--x\r\nno headers end"), HTTPFields([HTTPField(name: .contentType, value: "multipart/form-data; boundary=x")]))
            let malformed = try await env.call(.post, "/v1/meals/\(id)/photo", as: user, raw: broken, headers: brokenHeaders)
            #expect(malformed.status == .badRequest)
            #expect(malformed.code == "malformed_multipart")
        }
    }

    @Test func refusals() async throws {
        try await NutritionTestEnvironment.run(["MEAL_PHOTO_MAX_BYTES": "65536"]) { env in
            let user = try await env.user()
            let other = try await env.user()
            let id = try #require(try await env.meal(user)["id"] as? String)
            let path = "/v1/meals/\(id)/photo"
            let jpeg = try Photos.fixture("avatars/photo.jpg")

            let gif = try await env.call(.post, path, as: user, raw: ByteBuffer(string: "GIF89a\u{1}\u{0}\u{1}\u{0}"), headers: [.contentType: "image/gif"])
            #expect(gif.status == .unsupportedMediaType)
            #expect(gif.code == "unsupported_image")
            #expect(gif.text.contains("image/heic") && gif.text.contains("image/jpeg"), "names the accepted types")
            let text = try await env.call(.post, path, as: user, raw: ByteBuffer(string: "hello"), headers: [.contentType: "text/plain"])
            #expect(text.status == .unsupportedMediaType)

            // Over MEAL_PHOTO_MAX_BYTES: 413 from the Content-Length, whatever the bytes are.
            let big = try await env.call(.post, path, as: user, raw: ByteBuffer(bytes: jpeg + [UInt8](repeating: 0, count: 70_000)), headers: [.contentType: "image/jpeg"])
            #expect(big.status == .contentTooLarge)
            #expect(big.code == "too_large")

            let tall = try await env.call(.post, path, as: user, raw: ByteBuffer(bytes: try Photos.fixture("meals/tall.png")), headers: [.contentType: "image/png"])
            #expect(tall.status == .unprocessableContent)
            #expect(tall.code == "image_too_large")
            #expect(tall.text.contains("9000"))

            let truncated = try await env.call(.post, path, as: user, raw: ByteBuffer(bytes: Array(jpeg.prefix(40))), headers: [.contentType: "image/jpeg"])
            #expect(truncated.status == .unprocessableContent)
            #expect(truncated.code == "invalid_image")

            #expect(try await env.call(.post, path, raw: ByteBuffer(bytes: jpeg), headers: [.contentType: "image/jpeg"]).status == .unauthorized)
            #expect(try await env.call(.get, path).status == .unauthorized)
            let theirs = try await env.call(.post, path, as: other, raw: ByteBuffer(bytes: jpeg), headers: [.contentType: "image/jpeg"])
            #expect(theirs.status == .notFound)
            #expect(theirs.code == "meal_not_found")
            #expect(try await env.call(.post, "/v1/meals/\(UUID())/photo", as: user, raw: ByteBuffer(bytes: jpeg), headers: [.contentType: "image/jpeg"]).status == .notFound)
            #expect(try await env.call(.post, "/v1/meals/not-a-uuid/photo", as: user, raw: ByteBuffer(bytes: jpeg), headers: [.contentType: "image/jpeg"]).status == .notFound)
            #expect(try await env.call(.delete, path, as: other).status == .notFound)
            // Nothing was kept by any of these.
            #expect(try await env.count("SELECT count(*) FROM meal_photos") == 0)
            let meal = try await env.call(.get, "/v1/meals/\(id)", as: user)
            #expect(meal.json["photo_url"] is NSNull)
        }
    }

    @Test func ownerAndLinkedCoachOnly() async throws {
        try await NutritionTestEnvironment.run { env in
            let client = try await env.user()
            let coach = try await env.user()
            let stranger = try await env.user()
            let id = try #require(try await env.meal(client)["id"] as? String)
            let path = "/v1/meals/\(id)/photo"
            #expect(try await env.call(.get, path, as: client).code == "photo_not_found")
            _ = try await env.call(.post, path, as: client, raw: ByteBuffer(bytes: try Photos.fixture("avatars/photo.png")), headers: [.contentType: "image/png"])

            let owner = try await env.call(.get, path, as: client)
            #expect(owner.status == .ok)
            let etag = try #require(owner.headers[.eTag])
            let again = try await env.call(.get, path, as: client, headers: [.ifNoneMatch: etag])
            #expect(again.status == .notModified)
            #expect(again.body.readableBytes == 0)

            #expect(try await env.call(.get, path, as: coach).status == .notFound, "not linked yet")
            try await env.publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id), userID: client.id, producer: "invitations")
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM coach_links WHERE coach_id = '\(coach.id)'") == 1 }
            let coached = try await env.call(.get, path, as: coach)
            #expect(coached.status == .ok)
            #expect(coached.body == owner.body)
            // By its version too, a coach's copy is checked each time: their access ends with the link.
            let url = path + "?v=" + etag.dropFirst().prefix(16)
            #expect(try await env.call(.get, url, as: client).headers[.cacheControl] == "private, max-age=31536000, immutable")
            #expect(try await env.call(.get, url, as: coach).headers[.cacheControl] == "private, no-cache")
            // A coach reads, never writes.
            #expect(try await env.call(.delete, path, as: coach).status == .notFound)
            #expect(try await env.call(.get, path, as: stranger).status == .notFound)
        }
    }

    /// An app keeps a photo for as long as `Cache-Control` lets it: by its path, it is checked
    /// each time (its ETag), so a replaced photo is never shown from a cache; by its version, the
    /// owner may keep it for good, and a replaced photo has another.
    @Test func aReplacedPhotoIsNeverShownFromACache() async throws {
        try await NutritionTestEnvironment.run { env in
            let user = try await env.user()
            let id = try #require(try await env.meal(user)["id"] as? String)
            let path = "/v1/meals/\(id)/photo"
            let png = try await env.call(.post, path, as: user, raw: ByteBuffer(bytes: try Photos.fixture("avatars/photo.png")), headers: [.contentType: "image/png"])
            #expect(png.json["photo_url"] as? String == path)
            let firstPhoto = try await env.call(.get, path, as: user)
            #expect(firstPhoto.headers[.cacheControl] == "private, no-cache")
            let firstTag = try #require(firstPhoto.headers[.eTag])
            let first = path + "?v=" + firstTag.dropFirst().prefix(16)
            #expect(try await env.call(.get, first, as: user).headers[.cacheControl] == "private, max-age=31536000, immutable")

            let plate = try await env.call(.post, path, as: user, raw: ByteBuffer(bytes: try Photos.fixture("meals/plate.png")), headers: [.contentType: "image/png"])
            #expect(plate.json["photo_url"] as? String == path)
            // The copy the app holds is checked and replaced.
            let checked = try await env.call(.get, path, as: user, headers: [.ifNoneMatch: firstTag])
            #expect(checked.status == .ok && checked.body != firstPhoto.body)
            let secondTag = try #require(checked.headers[.eTag])
            let second = path + "?v=" + secondTag.dropFirst().prefix(16)
            #expect(try await env.call(.get, second, as: user).headers[.cacheControl] == "private, max-age=31536000, immutable")
            // The version before, or one that is not a version: the current photo, not to be kept unchecked.
            for stale in [first, path + "?v=", path + "?v=" + secondTag.dropFirst().prefix(15)] {
                let read = try await env.call(.get, stale, as: user)
                #expect(read.status == .ok && read.body == checked.body, "\(stale)")
                #expect(read.headers[.cacheControl] == "private, no-cache", "\(stale)")
            }

            // A meal sent back with its photo by its version keeps it.
            let edited = try await env.call(
                .put, "/v1/meals/\(id)", as: user,
                json: ["name": "Lunch", "eaten_at": "\(NutritionTestEnvironment.year)-06-01T12:30:00+02:00", "items": [NutritionTestEnvironment.item()], "photo_url": second])
            #expect(edited.status == .ok, "\(edited.text)")
            #expect(edited.json["photo_url"] as? String == path)
            // Another meal's photo, by its version or its path, is not this one's.
            let other = try #require(try await env.meal(user)["id"] as? String)
            for foreign in ["/v1/meals/\(other)/photo?v=\(second.suffix(16))", "/v1/meals/\(other)/photo", path + "x?v=\(second.suffix(16))"] {
                let refused = try await env.call(
                    .put, "/v1/meals/\(id)", as: user,
                    json: ["name": "Lunch", "eaten_at": "\(NutritionTestEnvironment.year)-06-01T12:30:00+02:00", "items": [NutritionTestEnvironment.item()], "photo_url": foreign])
                #expect(refused.fieldErrors == ["photo_url"], "\(foreign)")
            }
            // Deleting the photo clears the meal's photo_url, whichever of the two it holds.
            #expect(try await env.call(.delete, path, as: user).status == .noContent)
            #expect(try await env.call(.get, "/v1/meals/\(id)", as: user).json["photo_url"] is NSNull)
        }
    }

    /// An app that shows a meal, then sends it back corrected after its photo was deleted (on another
    /// device, or by the app itself), sends the photo's old path: the meal keeps no photo rather than a
    /// link to nothing.
    @Test func aCorrectionSentAfterThePhotoWasDeletedKeepsNoLinkToIt() async throws {
        try await NutritionTestEnvironment.run { env in
            let user = try await env.user()
            let png = ByteBuffer(bytes: try Photos.fixture("avatars/photo.png"))
            let id = try #require(try await env.meal(user)["id"] as? String)
            let uploaded = try await env.call(.post, "/v1/meals/\(id)/photo", as: user, raw: png, headers: [.contentType: "image/png"])
            let shown = try #require(uploaded.json["photo_url"] as? String)
            #expect(try await env.call(.delete, "/v1/meals/\(id)/photo", as: user).status == .noContent)
            for sentBack in [shown, shown + "?v=0123456789abcdef"] {
                let corrected = try await env.call(
                    .put, "/v1/meals/\(id)", as: user,
                    json: ["name": "Dinner", "eaten_at": "\(NutritionTestEnvironment.year)-06-01T19:30:00+02:00", "items": [NutritionTestEnvironment.item()], "photo_url": sentBack])
                #expect(corrected.status == .ok)
                #expect(corrected.json["photo_url"] is NSNull)
                #expect(try await env.call(.get, "/v1/meals/\(id)", as: user).json["photo_url"] is NSNull)
            }
            // A photo the app keeps elsewhere is still the meal's to name.
            let elsewhere = "https://photos.example.com/dinner.jpg"
            let named = try await env.call(
                .put, "/v1/meals/\(id)", as: user,
                json: ["name": "Dinner", "eaten_at": "\(NutritionTestEnvironment.year)-06-01T19:30:00+02:00", "items": [NutritionTestEnvironment.item()], "photo_url": elsewhere])
            #expect(named.json["photo_url"] as? String == elsewhere)
        }
    }

    @Test func deletingThePhotoTheMealOrTheAccount() async throws {
        try await NutritionTestEnvironment.run { env in
            let user = try await env.user()
            let png = ByteBuffer(bytes: try Photos.fixture("avatars/photo.png"))
            let first = try #require(try await env.meal(user)["id"] as? String)
            #expect(try await env.call(.post, "/v1/meals/\(first)/photo", as: user, raw: png, headers: [.contentType: "image/png"]).status == .ok)
            #expect(try await env.call(.delete, "/v1/meals/\(first)/photo", as: user).status == .noContent)
            #expect(try await env.call(.get, "/v1/meals/\(first)/photo", as: user).status == .notFound)
            #expect(try await env.call(.get, "/v1/meals/\(first)", as: user).json["photo_url"] is NSNull)
            let twice = try await env.call(.delete, "/v1/meals/\(first)/photo", as: user)
            #expect(twice.status == .notFound)
            #expect(twice.code == "photo_not_found")

            // A correction of the meal keeps its photo.
            let uploaded = try await env.call(.post, "/v1/meals/\(first)/photo", as: user, raw: png, headers: [.contentType: "image/png"])
            #expect(uploaded.status == .ok)
            let corrected = try await env.call(
                .put, "/v1/meals/\(first)", as: user, json: ["name": "Dinner", "eaten_at": "\(NutritionTestEnvironment.year)-06-01T19:30:00+02:00", "items": [NutritionTestEnvironment.item()]])
            #expect(corrected.status == .ok)
            #expect(corrected.json["photo_url"] as? String == uploaded.json["photo_url"] as? String)

            #expect(try await env.call(.delete, "/v1/meals/\(first)", as: user).status == .noContent)
            #expect(try await env.count("SELECT count(*) FROM meal_photos WHERE meal_id = '\(first)'") == 0)

            let second = try #require(try await env.meal(user)["id"] as? String)
            #expect(try await env.call(.post, "/v1/meals/\(second)/photo", as: user, raw: png, headers: [.contentType: "image/png"]).status == .ok)
            #expect(try await env.count("SELECT count(*) FROM meal_photos WHERE user_id = '\(user.id)'") == 1)
            try await env.publish(UserDeleted(userID: user.id), userID: user.id)
            try await waitUntil(.seconds(15)) { try await env.count("SELECT count(*) FROM meal_photos WHERE user_id = '\(user.id)'") == 0 }
        }
    }

    /// HEIF files that decode or allocate far more than their headers state (`Fixtures/meals/crafted`):
    /// each was decoded whole before it was refused, or taken, at 0.2 to 1.5 GB of memory for a file
    /// of a few kilobytes. Each is refused now before anything is decoded or any canvas made, by what
    /// its boxes and streams state; an honest tiled photo, as an iPhone writes it, is still taken.
    @Test(arguments: [
        "bomb8k-ispe64.heic", "bomb-grid2x2-8k-tiles-ispe512.heic", "bomb-grid-canvas16000-ispe1024.heic", "bomb-nested-grid-8x-4096sq.heic",
        "bomb-av1-8k-ispe64-mif1.heic", "mono8k-ispe8192x8.heic", "primary-is-thumbnail.heic", "iloc-index-in-version1.heic", "canvas-10bit.heic",
        "xmp-deflated.heic", "two-meta-boxes.heic", "iloc-extent-of-length-0.heic", "rotations-repeated.heic", "parameter-set-after-picture.heic",
    ])
    func aHEIFWhoseStreamsCodeMoreThanItStatesIsRefusedUndecoded(_ name: String) async throws {
        let bytes = ByteBuffer(bytes: try Photos.fixture("meals/crafted/\(name)"))
        #expect(ImageFormat(sniffing: bytes.readableBytesView) == .heic, "taken for a HEIC by its first bytes")
        do {
            let image = try CleanImage.cleanNow(
                bytes, format: .heic, maxSide: MealPhoto.maxSide, maxBytes: NutritionSettings.mealPhotoMaxDecodedBytes, maxLongSide: MealPhoto.storedLongSide,
                output: .jpeg)
            Issue.record("\(name) was taken as \(image.width)x\(image.height)")
        } catch .unreadable(let reason) {
            // libvips' own check comes only after the whole stream was decoded, the probe's canvas
            // check after libheif made the canvas.
            #expect(!reason.contains("on decode") && !reason.hasPrefix("the canvas is"), "\(name): \(reason)")
        } catch .tooManyBytes {
        } catch {
            Issue.record("\(name): \(error)")
        }
    }

    /// The sources of the crafted files, honest ones: 8 and 10 bits, one picture; and a tiled photo.
    @Test(arguments: ["flat512.heic", "flat512-10bit.heic", "grid-iphone-like-4032x3024.heic"])
    func anHonestHEIFIsTaken(_ name: String) throws {
        let bytes = ByteBuffer(bytes: try Photos.fixture("meals/crafted/\(name)"))
        let image = try CleanImage.cleanNow(
            bytes, format: .heic, maxSide: MealPhoto.maxSide, maxBytes: NutritionSettings.mealPhotoMaxDecodedBytes, maxLongSide: MealPhoto.storedLongSide,
            output: .jpeg)
        #expect(image.format == .jpeg && Photos.jpegSize(Array(buffer: image.bytes)).map { [$0.width, $0.height] } == [image.width, image.height], "\(name)")
    }

    @Test func aHEIFBombIsA422AndAnHonestTiledPhotoIsTaken() async throws {
        try await NutritionTestEnvironment.run { env in
            let user = try await env.user()
            let id = try #require(try await env.meal(user)["id"] as? String)
            let bomb = ByteBuffer(bytes: try Photos.fixture("meals/crafted/bomb-grid2x2-8k-tiles-ispe512.heic"))
            let refused = try await env.call(.post, "/v1/meals/\(id)/photo", as: user, raw: bomb, headers: [.contentType: "image/heic"])
            #expect(refused.status == .unprocessableContent && ["invalid_image", "image_too_large"].contains(refused.code ?? ""), "\(refused.text)")
            #expect(try await env.count("SELECT count(*) FROM meal_photos") == 0)
            // 4032 x 3024 in 512-pixel tiles, the grid an iPhone writes.
            let tiled = ByteBuffer(bytes: try Photos.fixture("meals/crafted/grid-iphone-like-4032x3024.heic"))
            let taken = try await env.call(.post, "/v1/meals/\(id)/photo", as: user, raw: tiled, headers: [.contentType: "image/heic"])
            #expect(taken.status == .ok, "\(taken.text)")
            let stored = Array(buffer: try await env.call(.get, "/v1/meals/\(id)/photo", as: user).body)
            let size = try #require(Photos.jpegSize(stored))
            #expect(size.width == 2048 && size.height == 1536, "\(size)")
        }
    }

    /// One user has at most `UPLOADS_PER_USER` uploads (2 by default) in the process at once, each
    /// held from before its body is read: one more is `429 too_many_uploads` with none of its body
    /// sent, while another user's goes on; an upload broken off gives its place back.
    @Test func oneUserSendsAtMostTheirShareOfUploadsAtOnce() async throws {
        let adminPort = try RedisServer.freePort()
        try await NutritionTestEnvironment.run(["ADMIN_HTTP_PORT": String(adminPort)]) { env in
            @Sendable func inFlight() async throws -> Int { Int(try await MetricsScrape.value("http_uploads_in_flight", port: adminPort) ?? -1) }
            let user = try await env.user()
            let other = try await env.user()
            let id = try #require(try await env.meal(user)["id"] as? String)
            let otherID = try #require(try await env.meal(other)["id"] as? String)
            let port = try #require(env.client.port)
            let head = { (path: String, token: String) in
                "POST \(path) HTTP/1.1\r\nHost: nutrition\r\nAuthorization: Bearer \(token)\r\nContent-Type: image/jpeg\r\nContent-Length: 1000000\r\n\r\n"
            }
            // Two uploads whose bodies have begun and never end.
            var held: [Int32] = []
            defer { for fd in held { close(fd) } }
            for _ in 0..<2 {
                let fd = try LoopbackSocket.connect(port: port)
                held.append(fd)
                let start = head("/v1/meals/\(id)/photo", user.token) + String(repeating: "x", count: 1024)
                _ = LoopbackSocket.send(fd, Array(start.utf8))
            }
            try await waitUntil(.seconds(15)) { try await inFlight() == 2 }

            // A third: refused on its head alone, the client asked to end the connection.
            let refused = try await LoopbackSocket.send(port: port, head("/v1/meals/\(id)/photo", user.token))
            #expect(refused.hasPrefix("HTTP/1.1 429"), "\(refused)")
            #expect(refused.contains("\"code\":\"too_many_uploads\""), "\(refused)")
            #expect(refused.lowercased().contains("retry-after: 1") && refused.lowercased().contains("connection: close"), "\(refused)")
            // An analysis is an upload too, and so are both by paths the router reads with their
            // empty segments skipped.
            for path in ["/v1/meals/analyze", "/v1/meals//analyze", "//v1/meals/\(id)//photo"] {
                let refused = try await LoopbackSocket.send(port: port, head(path, user.token))
                #expect(refused.hasPrefix("HTTP/1.1 429") && refused.contains("too_many_uploads"), "\(path): \(refused)")
            }
            // Another user's upload goes on, and reading a photo is no upload.
            let photo = ByteBuffer(bytes: try Photos.fixture("avatars/photo.jpg"))
            let others = try await env.call(.post, "/v1/meals/\(otherID)/photo", as: other, raw: photo, headers: [.contentType: "image/jpeg"])
            #expect(others.status == .ok, "\(others.text)")
            let read = try await env.call(.get, "/v1/meals/\(id)/photo", as: user)
            #expect(read.status == .notFound && read.json["code"] as? String == "photo_not_found", "\(read.text)")

            // One upload broken off: its place is free again, and the next upload is taken.
            close(held.removeFirst())
            try await waitUntil(.seconds(15)) { try await inFlight() == 1 }
            let next = try await env.call(.post, "/v1/meals/\(id)/photo", as: user, raw: photo, headers: [.contentType: "image/jpeg"])
            #expect(next.status == .ok, "\(next.text)")
            close(held.removeFirst())
            try await waitUntil(.seconds(15)) { try await inFlight() == 0 }
        }
    }
}
