import Foundation
import HTTPTypes
import Images
import Models
import NIOCore
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import ServiceKitTokens
@testable import Social
import Testing
import TestSupport

@Suite struct ProfileTests {
    @Test func registrationEventMakesTheProfileOnceAndLazyCreationDoesNotDuplicate() async throws {
        try await SocialTestEnvironment.run { env in
            let cook = try await env.user("Ada Cook")
            let me = try await env.call(.get, "/v1/profiles/me", as: cook)
            #expect(me.status == .ok)
            #expect(me.json["display_name"] as? String == "Ada Cook")
            #expect(me.json["followers_count"] as? Int == 0)
            #expect(me.json["dietary_visibility"] as? String == "followers_only")
            #expect(me.json["relationship"] == nil)

            // First request before the event: made lazily; the late event fills the name, no second row.
            let early = try await env.user(registered: false)
            #expect(try await env.call(.get, "/v1/profiles/me", as: early).status == .ok)
            try await env.publish(UserRegistered(userID: early.id, email: "e@example.com", displayName: "Late Event", provider: "apple"), userID: early.id)
            try await waitUntil(.seconds(10)) { try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(early.id)' AND display_name = 'Late Event'") == 1 }
            #expect(try await env.count("SELECT count(*) FROM profiles WHERE user_id = '\(early.id)'") == 1)
            // The event delivered again changes nothing.
            try await env.publish(UserRegistered(userID: early.id, email: "e@example.com", displayName: "Other", provider: "apple"), userID: early.id)
            try await Task.sleep(for: .milliseconds(500))
            #expect(try await env.call(.get, "/v1/profiles/me", as: early).json["display_name"] as? String == "Late Event")
        }
    }

    /// Two devices editing one profile: the one holding an old version is told so (`412`), not
    /// allowed to overwrite the other's edit unseen.
    @Test func anEditWithAStaleIfMatchIsRefused() async throws {
        try await SocialTestEnvironment.run { env in
            let cook = try await env.user()
            let read = try await env.call(.get, "/v1/profiles/me", as: cook)
            let tag = try #require(read.headers[.eTag])
            let first = try await env.call(.patch, "/v1/profiles/me", as: cook, json: ["bio": "first device"], headers: [.ifMatch: tag])
            #expect(first.status == .ok && first.headers[.eTag] != tag)
            let second = try await env.call(.patch, "/v1/profiles/me", as: cook, json: ["bio": "second device"], headers: [.ifMatch: tag])
            #expect(second.status == .preconditionFailed && second.code == "precondition_failed")
            #expect(try await env.call(.get, "/v1/profiles/me", as: cook).json["bio"] as? String == "first device")
            let fresh = try #require(first.headers[.eTag])
            #expect(try await env.call(.patch, "/v1/profiles/me", as: cook, json: ["bio": "second device"], headers: [.ifMatch: fresh]).status == .ok)
        }
    }

    @Test func patchUpdatesFieldsAndAnnouncesDietaryChanges() async throws {
        try await SocialTestEnvironment.run { env in
            let cook = try await env.user()
            let reply = try await env.call(
                .patch, "/v1/profiles/me", as: cook,
                json: [
                    "username": "Chef.Ada_1", "display_name": "  Ada  ", "bio": "Bread\nand soup",
                    "dietary_preferences": ["vegan", "gluten_free", "vegan"], "allergies": [["name": "peanuts", "severity": "life_threatening"]],
                    "favorite_cuisines": ["Thai", "thai", "Italian"], "cooking_preferences": ["skill_level": "advanced", "time_budget_minutes": 45, "equipment": ["oven"]],
                    "dietary_visibility": "public",
                ])
            #expect(reply.status == .ok, "\(reply.text)")
            // Byte for byte what JSONEncoder.api writes for it (the body is written by APIJSON).
            let reencoded = try JSONEncoder.api.encode(try JSONDecoder.api.decode(JSONValue.self, from: Data(reply.text.utf8)))
            #expect(reply.text == String(decoding: reencoded, as: UTF8.self))
            #expect(reply.json["username"] as? String == "Chef.Ada_1")
            #expect(reply.json["display_name"] as? String == "Ada")
            #expect(reply.json["dietary_preferences"] as? [String] == ["vegan", "gluten_free"])
            #expect(reply.json["favorite_cuisines"] as? [String] == ["Thai", "Italian"])
            #expect(reply.json[path: "cooking_preferences.time_budget_minutes"] as? Int == 45)
            #expect((reply.json["allergies"] as? [[String: Any]])?.first?["severity"] as? String == "life_threatening")
            try await waitUntil(.seconds(10)) { try await env.events(ProfileUpdated.eventType).contains { ($0[path: "data.user_id"] as? String)?.lowercased() == cook.path } }
            let updates = try await env.events(ProfileUpdated.eventType).filter { ($0[path: "data.user_id"] as? String)?.lowercased() == cook.path }
            #expect((updates.first?[path: "data.allergies"] as? [[String: Any]])?.first?["name"] as? String == "peanuts")

            // A change that leaves dietary data alone announces nothing more.
            #expect(try await env.call(.patch, "/v1/profiles/me", as: cook, json: ["bio": NSNull()]).json["bio"] == nil)
            #expect(try await env.call(.patch, "/v1/profiles/me", as: cook, json: ["dietary_preferences": ["gluten_free", "vegan"]]).status == .ok)
            try await Task.sleep(for: .milliseconds(800))
            #expect(try await env.events(ProfileUpdated.eventType).filter { ($0[path: "data.user_id"] as? String)?.lowercased() == cook.path }.count == 1)

            // By username, case-insensitively.
            let other = try await env.user()
            let found = try await env.call(.get, "/v1/profiles/by-username/chef.ada_1", as: other)
            #expect(found.status == .ok && (found.json["id"] as? String)?.lowercased() == cook.path)
            #expect(try await env.call(.get, "/v1/profiles/by-username/nobody_here", as: other).status == .notFound)
        }
    }

    @Test func usernamesAreUniqueIgnoringCaseAndChecked() async throws {
        try await SocialTestEnvironment.run { env in
            let first = try await env.user()
            let second = try await env.user()
            #expect(try await env.call(.patch, "/v1/profiles/me", as: first, json: ["username": "pasta_queen"]).status == .ok)
            let taken = try await env.call(.patch, "/v1/profiles/me", as: second, json: ["username": "Pasta_Queen"])
            #expect(taken.status == .conflict && taken.code == "username_taken" && taken.fieldErrors == ["username"])
            // Keeping one's own name in another case is fine.
            #expect(try await env.call(.patch, "/v1/profiles/me", as: first, json: ["username": "PASTA_QUEEN"]).status == .ok)
            for bad in ["ab", String(repeating: "a", count: 31), "has space", "émile", ".dot", "dot.", "a..b", "admin", "Support", "me", "adm1n", "SUPP0RT"] {
                let reply = try await env.call(.patch, "/v1/profiles/me", as: second, json: ["username": bad])
                #expect(reply.status == .badRequest && reply.fieldErrors == ["username"], "\(bad): \(reply.text)")
            }
        }
    }

    /// Names that look alike are one name (UTS #39's confusables for a username's characters): I, l, 1
    /// and i fold together, as O and 0 do, on top of case. The chosen spelling is what others see.
    /// A display name is found by a prefix in any case, letters outside ASCII too, whatever the
    /// database's locale (the tests' is C, where `lower` keeps `É` as it is).
    @Test func displayNamesAreFoundInAnyCase() async throws {
        try await SocialTestEnvironment.run { env in
            let viewer = try await env.user()
            let tag = String(UUID().uuidString.prefix(6)).lowercased()
            let emile = try await env.user("Émile Ölund \(tag)")
            for query in ["émile", "ÉMILE ö", "Émile Ölund \(tag)", "émile ölund \(tag.uppercased())"] {
                let encoded = query.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
                let found = try await env.call(.get, "/v1/profiles/search?q=\(encoded)&limit=100", as: viewer)
                #expect(found.status == .ok && found.ids.contains(emile.path), "\(query): \(found.text)")
            }
            let other = try await env.call(.get, "/v1/profiles/search?q=%C3%A9mila&limit=100", as: viewer)
            #expect(!other.ids.contains(emile.path))
        }
    }

    @Test func usernamesThatLookAlikeAreOneName() async throws {
        try await SocialTestEnvironment.run { env in
            let alice = try await env.user()
            let impostor = try await env.user()
            let chosen = try await env.call(.patch, "/v1/profiles/me", as: alice, json: ["username": "AIice_C00k"])
            #expect(chosen.status == .ok && chosen.json["username"] as? String == "AIice_C00k")
            for lookalike in ["alice_cook", "a1ice_c0ok", "AlICE_COOK", "aiice_cOOk", "al1ce_c0Ok"] {
                let reply = try await env.call(.patch, "/v1/profiles/me", as: impostor, json: ["username": lookalike])
                #expect(reply.status == .conflict && reply.code == "username_taken", "\(lookalike): \(reply.text)")
            }
            #expect(try await env.call(.patch, "/v1/profiles/me", as: impostor, json: ["username": "alice_cooks"]).status == .ok)
            #expect(try await env.call(.get, "/v1/profiles/by-username/AIice_C00k", as: impostor).json["username"] as? String == "AIice_C00k")
        }
    }

    /// Invisible characters that change how a name reads (a right-to-left override, zero-width spaces)
    /// are refused in names and bios; the joiner inside an emoji sequence is not.
    @Test func invisibleFormattingCharactersAreRefusedInText() async throws {
        try await SocialTestEnvironment.run { env in
            let cook = try await env.user()
            for (field, value) in [
                ("display_name", "Ada\u{202E}kooc"), ("display_name", "Ad\u{200B}a"), ("bio", "Bread\u{2066}and\u{2069}"),
                ("bio", "\u{FEFF}hello"),
            ] {
                let reply = try await env.call(.patch, "/v1/profiles/me", as: cook, json: [field: value])
                #expect(reply.status == .badRequest && reply.fieldErrors == [field], "\(field): \(reply.text)")
            }
            let chef = try await env.call(.patch, "/v1/profiles/me", as: cook, json: ["display_name": "Ada 👩‍🍳", "bio": "Line one\nline two 🏴󠁧󠁢󠁳󠁣󠁴󠁿"])
            #expect(chef.status == .ok && chef.json["display_name"] as? String == "Ada 👩‍🍳", "\(chef.text)")
        }
    }

    /// `count` combining marks (U+0300…U+036F), which all attach to the letter before them.
    static func marks(_ count: Int) -> String {
        String(String.UnicodeScalarView((0..<count).map { Unicode.Scalar(0x300 + UInt32($0 % 0x70))! }))
    }

    @Test func badInputIsAClear400NamingTheField() async throws {
        try await SocialTestEnvironment.run { env in
            let cook = try await env.user()
            let cases: [(Any, [String])] = [
                (["favourite_color": "red"], ["favourite_color"]),
                (["avatar_url": "https://x.test/a.png"], ["avatar_url"]),
                (["bio": String(repeating: "b", count: 301)], ["bio"]),
                (["bio": 5], ["bio"]),
                (["is_private": "yes"], ["is_private"]),
                (["dietary_preferences": ["vegan", "carnivore"]], ["dietary_preferences"]),
                (["dietary_preferences": "vegan"], ["dietary_preferences"]),
                (["allergies": [["name": "nuts", "severity": "deadly"]]], ["allergies[0].severity"]),
                (["allergies": [["name": "nuts", "severity": "mild"], ["name": "NUTS", "severity": "mild"]]], ["allergies[1].name"]),
                (["allergies": [["severity": "mild"]]], ["allergies[0].name"]),
                (["cooking_preferences": ["skill_level": "god"]], ["cooking_preferences.skill_level"]),
                (["cooking_preferences": ["time_budget_minutes": 2.5]], ["cooking_preferences.time_budget_minutes"]),
                (["cooking_preferences": ["oven": true]], ["cooking_preferences.oven"]),
                (["dietary_visibility": "friends"], ["dietary_visibility"]),
                (["favorite_cuisines": Array(repeating: "x", count: 21)], ["favorite_cuisines"]),
                ([String: Any](), ["body"]),
                (["username": "ok_name", "bio": 1, "is_private": 0], ["bio", "is_private"]),
                // Limits count code points, as the OpenAPI maxLength does: a letter carrying thousands of
                // combining marks is one Character but thousands of code points (and bytes in an index).
                (["display_name": "a" + Self.marks(20_000)], ["display_name"]),
                (["bio": String(repeating: "b" + Self.marks(9), count: 300)], ["bio"]),
                (["favorite_cuisines": ["T" + Self.marks(40)]], ["favorite_cuisines[0]"]),
                (["allergies": [["name": "n" + Self.marks(50), "severity": "mild"]]], ["allergies[0].name"]),
            ]
            for (body, fields) in cases {
                let reply = try await env.call(.patch, "/v1/profiles/me", as: cook, json: body)
                #expect(reply.status == .badRequest, "\(body): \(reply.text)")
                #expect(reply.headers[.contentType] == Problem.mediaType)
                #expect(reply.fieldErrors == fields, "\(body): \(reply.text)")
            }
            // Nothing of the refused bodies was applied.
            #expect(try await env.call(.get, "/v1/profiles/me", as: cook).json["username"] is NSNull)
            let malformed = try await env.call(.patch, "/v1/profiles/me", as: cook, raw: ByteBuffer(string: "{\"bio\": "), headers: [.contentType: "application/json"])
            #expect(malformed.status == .badRequest && malformed.code == "malformed_json")
            let notObject = try await env.call(.patch, "/v1/profiles/me", as: cook, json: ["a", "b"])
            #expect(notObject.status == .badRequest)
            let huge = try await env.call(
                .patch, "/v1/profiles/me", as: cook, raw: ByteBuffer(string: "{\"bio\":\"" + String(repeating: "x", count: 3 * 1024 * 1024) + "\"}"), headers: [.contentType: "application/json"])
            #expect(huge.status == .contentTooLarge)
            // No token, a bad token, an expired token.
            #expect(try await env.call(.get, "/v1/profiles/me", as: nil).status == .unauthorized)
            let forged = SocialTestEnvironment.User(id: cook.id, token: cook.token + "x")
            #expect(try await env.call(.get, "/v1/profiles/me", as: forged).status == .unauthorized)
            let expired = SocialTestEnvironment.User(id: cook.id, token: try await env.issuer.token(userID: cook.id, issuedAt: Date().addingTimeInterval(-3600), expiresIn: 900))
            #expect(try await env.call(.get, "/v1/profiles/me", as: expired).status == .unauthorized)
            #expect(try await env.call(.get, "/v1/profiles/not-a-uuid", as: cook).status == .notFound)
            let search = try await env.call(.get, "/v1/profiles/search", as: cook)
            #expect(search.status == .badRequest && search.fieldErrors == ["q"])
            #expect(try await env.call(.get, "/v1/profiles/search?q=a&limit=0", as: cook).status == .badRequest)
            let markedQuery = ("a" + Self.marks(60)).addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            #expect(try await env.call(.get, "/v1/profiles/search?q=\(markedQuery)", as: cook).fieldErrors == ["q"])
            #expect(try await env.call(.get, "/v1/profiles/search?q=a&cursor=garbage", as: cook).status == .badRequest)
            // NUL and other control characters anywhere: a 4xx, never a database error.
            #expect(try await env.call(.get, "/v1/profiles/search?q=%00", as: cook).status == .badRequest)
            #expect(try await env.call(.get, "/v1/profiles/by-username/a%00b", as: cook).status == .notFound)
            for body: [String: Any] in [
                ["favorite_cuisines": ["Thai\u{0}"]], ["allergies": [["name": "nu\u{0}ts", "severity": "mild"]]], ["display_name": "A\u{0}"],
                ["cooking_preferences": ["equipment": ["pan\u{7}"]]],
            ] {
                #expect(try await env.call(.patch, "/v1/profiles/me", as: cook, json: body).status == .badRequest, "\(body)")
            }
            // A hand-made cursor far outside any real time is still just a page.
            let wild = Cursor.encode(TimeCursor(micros: -9_000_000_000_000_000_000, id: UUID()))
            #expect(try await env.call(.get, "/v1/profiles/\(cook.path)/followers?cursor=\(wild)", as: cook).status == .ok)
            #expect(try await env.call(.get, "/v1/notifications?cursor=\(Cursor.encode(TimeCursor(micros: .max, id: UUID())))", as: cook).status == .ok)
        }
    }

    @Test func onboardingStepsFollowTheData() async throws {
        try await SocialTestEnvironment.run { env in
            let cook = try await env.user("Ada")
            func states() async throws -> ([String: String], Bool) {
                let reply = try await env.call(.get, "/v1/profiles/me/onboarding", as: cook)
                let steps = reply.json["steps"] as? [[String: Any]] ?? []
                return (Dictionary(uniqueKeysWithValues: steps.map { ($0["step"] as! String, $0["state"] as! String) }), reply.json["complete"] as? Bool ?? true)
            }
            var (state, complete) = try await states()
            #expect(state == ["name": "pending", "avatar": "pending", "dietary_preferences": "pending", "allergies": "pending", "cuisines": "pending"])
            #expect(!complete)
            for step in ["name", "dietary_preferences", "cuisines"] {
                let required = try await env.call(.post, "/v1/profiles/me/onboarding/\(step)/skip", as: cook)
                #expect(required.status == .conflict && required.code == "step_required", "\(step)")
            }
            #expect(try await env.call(.post, "/v1/profiles/me/onboarding/favorite_color/skip", as: cook).status == .notFound)
            #expect(try await env.call(.post, "/v1/profiles/me/onboarding/avatar/skip", as: cook).json["steps"] != nil)
            #expect(try await env.call(.post, "/v1/profiles/me/onboarding/avatar/skip", as: cook).status == .ok)
            (state, _) = try await states()
            #expect(state["avatar"] == "skipped" && state["allergies"] == "pending")
            #expect(try await env.call(.post, "/v1/profiles/me/onboarding/allergies/skip", as: cook).status == .ok)
            (state, _) = try await states()
            #expect(state["allergies"] == "skipped")
            _ = try await env.call(.patch, "/v1/profiles/me", as: cook, json: ["username": "ada_bakes", "dietary_preferences": [], "allergies": []])
            (state, complete) = try await states()
            #expect(state == ["name": "done", "avatar": "skipped", "dietary_preferences": "done", "allergies": "done", "cuisines": "pending"])
            #expect(!complete)
            _ = try await env.call(.patch, "/v1/profiles/me", as: cook, json: ["favorite_cuisines": ["Persian"]])
            (state, complete) = try await states()
            #expect(state["cuisines"] == "done" && complete)
        }
    }

    /// Small photos as phones make them, with EXIF (GPS, camera, orientation), comments and XMP;
    /// `Tests/Fixtures/avatars/make_fixtures.py` made them.
    static func fixture(_ name: String) -> [UInt8] {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fixtures/avatars/\(name)")
        return Array(try! Data(contentsOf: url))
    }
    static let png = fixture("photo.png")
    static let jpeg = fixture("photo.jpg")
    static let webp = fixture("photo.webp")

    @Test func avatarsAreCheckedByTheirBytesAndCached() async throws {
        try await SocialTestEnvironment.run { env in
            let cook = try await env.user()
            let viewer = try await env.user()
            // The header says PNG; the bytes are text.
            let lie = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(string: "<svg onload=alert(1)>"), headers: [.contentType: "image/png"])
            #expect(lie.status == .unsupportedMediaType && lie.code == "unsupported_image")
            let big = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: Self.png + Array(repeating: 0, count: 2 * 1024 * 1024)))
            #expect(big.status == .contentTooLarge && big.code == "too_large")
            let empty = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(), headers: [.contentType: "image/png"])
            #expect(empty.status == .unsupportedMediaType && empty.code == "unsupported_image")
            #expect(try await env.call(.get, "/v1/profiles/\(cook.path)/avatar", as: viewer).status == .notFound)
            // 2 MiB exactly is allowed (a photo with data after its end, which decoders ignore).
            let largest = Self.png + Array(repeating: 0, count: 2 * 1024 * 1024 - Self.png.count)
            let atLimit = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: largest))
            #expect(atLimit.status == .ok, "\(atLimit.text)")

            for (bytes, type) in [(Self.jpeg, "image/jpeg"), (Self.webp, "image/webp"), (Self.png, "image/png")] {
                let uploaded = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: bytes), headers: [.contentType: "application/octet-stream"])
                #expect(uploaded.status == .ok, "\(type): \(uploaded.text)")
                let url = try #require(uploaded.json["avatar_url"] as? String)
                #expect(url.hasPrefix("/v1/profiles/\(cook.id.uuidString.lowercased())/avatar?v="), "ids are written as the JSON bodies write them")
                let image = try await env.call(.get, url, as: viewer)
                #expect(image.status == .ok && image.headers[.contentType] == type)
                #expect(image.headers[.xContentTypeOptions] == "nosniff")
                #expect(ImageFormat(sniffing: image.body.readableBytesView)?.rawValue == type)
            }
            let image = try await env.call(.get, "/v1/profiles/\(cook.path)/avatar", as: viewer)
            let etag = try #require(image.headers[.eTag])
            #expect(image.headers[.cacheControl]?.contains("max-age") == true)
            let again = try await env.call(.get, "/v1/profiles/\(cook.path)/avatar", as: viewer, headers: [.ifNoneMatch: etag])
            #expect(again.status == .notModified && again.body.readableBytes == 0)
            // A weak validator, and a list, match as well; another tag does not.
            for header in ["W/\(etag)", "\"other\", \(etag)", "*"] {
                #expect(try await env.call(.get, "/v1/profiles/\(cook.path)/avatar", as: viewer, headers: [.ifNoneMatch: header]).status == .notModified, "\(header)")
            }
            #expect(try await env.call(.get, "/v1/profiles/\(cook.path)/avatar", as: viewer, headers: [.ifNoneMatch: "W/\"other\""]).status == .ok)
            #expect(try await env.call(.delete, "/v1/profiles/me/avatar", as: cook).status == .noContent)
            #expect(try await env.call(.delete, "/v1/profiles/me/avatar", as: cook).status == .noContent)
            #expect(try await env.call(.get, "/v1/profiles/\(cook.path)/avatar", as: viewer).status == .notFound)
            #expect(try await env.call(.get, "/v1/profiles/me", as: cook).json["avatar_url"] is NSNull)
        }
    }

    /// What a phone writes into a photo (the GPS position, the camera, comments, XMP) is not stored
    /// nor served: the image is decoded and encoded again, upright by its EXIF orientation, and at
    /// most 1024 pixels on its long side. An image whose header states a side over 4096 pixels is
    /// refused before it is decoded, and bytes that start like an image but are none are refused too.
    @Test func avatarsLoseTheirMetadataAndHugeOnesAreRefused() async throws {
        try await SocialTestEnvironment.run { env in
            let cook = try await env.user()
            let secrets = ["EvilCam", "secret-comment", "secret-xmp"]
            for (name, bytes) in [("photo.jpg", Self.jpeg), ("photo.png", Self.png), ("photo.webp", Self.webp)] {
                #expect(secrets.prefix(3).contains { Self.contains(bytes, $0) }, "\(name) fixture carries its metadata")
                let uploaded = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: bytes))
                #expect(uploaded.status == .ok, "\(name): \(uploaded.text)")
                let served = try await env.call(.get, "/v1/profiles/\(cook.path)/avatar", as: cook)
                let stored = Array(served.body.readableBytesView)
                for secret in secrets { #expect(!Self.contains(stored, secret), "\(name) still carries \(secret)") }
                // JPEG and PNG come back with no EXIF at all. libvips gives a WebP a minimal EXIF
                // of its own (resolution, orientation): it has no GPS block (tag 0x8825).
                if name == "photo.webp" {
                    let exif = Self.webpChunk("EXIF", in: stored) ?? []
                    #expect(!exif.indices.dropLast().contains { exif[$0] == 0x88 && exif[$0 + 1] == 0x25 }, "\(name) has a GPS block")
                } else {
                    #expect(!Self.contains(stored, "Exif"), "\(name) has EXIF")
                }
                // Stored 64×48 with orientation 6 (turn 90°): served upright, 48×64.
                let format = try #require(ImageFormat(sniffing: stored))
                let again = try CleanImage.cleanNow(ByteBuffer(bytes: stored), format: format, maxSide: AvatarRoutes.maxSide)
                #expect((again.width, again.height) == (48, 64), "\(name)")
            }
            let wide = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: Self.fixture("wide.png")))
            #expect(wide.status == .unprocessableContent && wide.code == "image_too_large", "\(wide.text)")
            #expect(wide.text.contains("5000×5000"))
            let bomb = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: Self.fixture("bomb.png")))
            #expect(bomb.status == .unprocessableContent && bomb.code == "image_too_large" && bomb.text.contains("20000×20000"), "\(bomb.text)")
            for bytes in [Array(Self.jpeg.prefix(40)), [0xFF, 0xD8, 0xFF, 0xE0] + Array(repeating: 1, count: 100), Array(Self.png.prefix(30))] {
                let broken = try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: bytes))
                #expect(broken.status == .unprocessableContent && broken.code == "invalid_image", "\(broken.text)")
                #expect(broken.headers[.contentType] == "application/problem+json")
            }
            // The last good one is still the avatar.
            #expect(try await env.call(.get, "/v1/profiles/\(cook.path)/avatar", as: cook).headers[.contentType] == "image/webp")

            // A camera's photo (3000×2000) is kept scaled down to 1024 pixels on its long side.
            let camera = Self.fixture("camera.jpg")
            #expect(try await env.call(.put, "/v1/profiles/me/avatar", as: cook, raw: ByteBuffer(bytes: camera)).status == .ok)
            let scaled = Array(try await env.call(.get, "/v1/profiles/\(cook.path)/avatar", as: cook).body.readableBytesView)
            let kept = try CleanImage.cleanNow(ByteBuffer(bytes: scaled), format: .jpeg, maxSide: AvatarRoutes.maxSide)
            #expect(kept.width == 1024 && (682...683).contains(kept.height), "\(kept.width)×\(kept.height)")
            #expect(scaled.count < camera.count / 2, "\(scaled.count) bytes")
        }
    }

    /// The payload of a WebP (RIFF) chunk.
    static func webpChunk(_ kind: String, in bytes: [UInt8]) -> [UInt8]? {
        var offset = 12
        while offset + 8 <= bytes.count {
            let size = Int(bytes[offset + 4]) | Int(bytes[offset + 5]) << 8 | Int(bytes[offset + 6]) << 16 | Int(bytes[offset + 7]) << 24
            let end = min(bytes.count, offset + 8 + size)
            if bytes[offset..<(offset + 4)].elementsEqual(kind.utf8) { return Array(bytes[(offset + 8)..<end]) }
            offset = end + (size & 1)
        }
        return nil
    }

    static func contains(_ bytes: [UInt8], _ text: String) -> Bool {
        let needle = Array(text.utf8)
        guard needle.count <= bytes.count else { return false }
        return (0...(bytes.count - needle.count)).contains { bytes[$0..<($0 + needle.count)].elementsEqual(needle) }
    }

    @Test func theCreatorRoleGivesTheVerifiedBadge() async throws {
        try await SocialTestEnvironment.run { env in
            let cook = try await env.user()
            try await env.publish(UserRolesChanged(userID: cook.id, roles: [.user, .creator], added: [.creator], removed: []), userID: cook.id)
            try await waitUntil(.seconds(10)) { try await env.call(.get, "/v1/profiles/me", as: cook).json["is_verified"] as? Bool == true }
            try await env.publish(UserRolesChanged(userID: cook.id, roles: [.user], added: [], removed: [.creator]), userID: cook.id)
            try await waitUntil(.seconds(10)) { try await env.call(.get, "/v1/profiles/me", as: cook).json["is_verified"] as? Bool == false }
        }
    }

    @Test func searchFindsPrefixesAndLeavesOutWhoBlocksTheCaller() async throws {
        try await SocialTestEnvironment.run { env in
            let caller = try await env.user()
            var made: [SocialTestEnvironment.User] = []
            for index in 0..<5 {
                let user = try await env.user("Basil Fan \(index)")
                _ = try await env.call(.patch, "/v1/profiles/me", as: user, json: ["username": "basil_\(index)"])
                made.append(user)
            }
            let other = try await env.user("Mint")
            _ = try await env.call(.patch, "/v1/profiles/me", as: other, json: ["username": "mint_only"])
            _ = try await env.call(.post, "/v1/profiles/\(caller.path)/block", as: made[4])
            var seen: [String] = []
            var cursor: String?
            repeat {
                let reply = try await env.call(.get, "/v1/profiles/search?q=BAS&limit=2" + (cursor.map { "&cursor=\($0)" } ?? ""), as: caller)
                #expect(reply.status == .ok)
                seen += reply.ids
                cursor = reply.json["next_cursor"] as? String
            } while cursor != nil
            #expect(seen == made.prefix(4).map(\.path))
            #expect(try await env.call(.get, "/v1/profiles/search?q=basil%20fan", as: caller).ids.count == 4)
            #expect(try await env.call(.get, "/v1/profiles/search?q=%25", as: caller).ids.isEmpty)
        }
    }

    /// `ProfileView.encode(to:)` is written out: it must write every field it has, in the text
    /// `JSONEncoder.api` writes, whichever writer the response goes through.
    @Test func aProfileViewWritesEveryField() throws {
        let created = Date(timeIntervalSince1970: 1_790_000_000.25), updated = Date(timeIntervalSince1970: 1_790_000_060.5)
        let id = UUID(uuidString: "0A1B2C3D-0000-4000-8000-00000000ABCD")!
        let record = ProfileRecord(
            id: id, username: "ada", displayName: "Ada \"Cook\"", bio: "Bread", avatarETag: "e1", isVerified: true, isPrivate: true,
            hiddenAt: updated, dietaryPreferences: ["vegan"], allergies: [Allergy(name: "peanuts", severity: .severe)], favoriteCuisines: ["Thai"],
            cookingPreferences: CookingPreferences(skillLevel: .advanced, timeBudgetMinutes: 30, equipment: ["oven"]), dietaryVisibility: .followersOnly,
            onboardingAnswered: [], onboardingSkipped: [], followersCount: 100_000, followingCount: 3, createdAt: created, updatedAt: updated)
        var view = ProfileView(record, relationship: nil, isOwner: false, isStaff: true)
        view.relationship = Relationship(following: true, muting: true)
        // Every stored property has a key, and every key is written, each with its own value.
        #expect(Mirror(reflecting: view).children.count == ProfileView.CodingKeys.allCases.count)
        let foundation = try JSONEncoder.api.encode(view)
        // Ids in lowercase (RFC 9562), where Foundation writes them uppercase.
        let expected =
            #"{"allergies":[{"name":"peanuts","severity":"severe"}],"avatar_url":"/v1/profiles/0a1b2c3d-0000-4000-8000-00000000abcd/avatar?v=e1","bio":"Bread","#
            + #""cooking_preferences":{"equipment":["oven"],"skill_level":"advanced","time_budget_minutes":30},"created_at":"2026-09-21T14:13:20.250Z","#
            + #""dietary_preferences":["vegan"],"dietary_visibility":"followers_only","display_name":"Ada \"Cook\"","favorite_cuisines":["Thai"],"#
            + #""followers_count":100000,"following_count":3,"id":"0a1b2c3d-0000-4000-8000-00000000abcd","is_hidden":true,"is_private":true,"is_verified":true,"#
            + #""relationship":{"blocked_by":false,"blocking":false,"followed_by":false,"following":true,"muting":true,"requested":false},"#
            + #""updated_at":"2026-09-21T14:14:20.500Z","username":"ada"}"#
        #expect(String(decoding: try APIJSON.encode(view), as: UTF8.self) == expected)
        let object = try #require(try JSONSerialization.jsonObject(with: foundation) as? [String: Any])
        #expect(Set(object.keys) == Set(ProfileView.CodingKeys.allCases.map(\.stringValue)))
        #expect(lowercasingUUIDs(String(decoding: foundation, as: UTF8.self)) == expected)
        // The fields a stranger may not see are left out, not written as null.
        let stranger = try JSONEncoder.api.encode(ProfileView(record, relationship: Relationship(), isOwner: false, isStaff: false))
        let shown = try #require(try JSONSerialization.jsonObject(with: stranger) as? [String: Any])
        #expect(Set(shown.keys) == ["avatar_url", "created_at", "display_name", "followers_count", "following_count", "id", "is_private", "is_verified", "relationship", "username"])
        #expect(
            String(decoding: try APIJSON.encode(ProfileView(record, relationship: Relationship(), isOwner: false, isStaff: false)), as: UTF8.self)
                == lowercasingUUIDs(String(decoding: stranger, as: UTF8.self)))
    }
}
