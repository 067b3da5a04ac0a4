import Foundation
import HTTPTypes
import Images
import NIOCore
@testable import Nutrition
import Testing
import TestSupport

/// A share link keeps the photo as it was when the link was made, serves it while the link lives,
/// and its card shows it beside the meal.
@Suite struct SharePhotoTests {
    @Test func theSnapshotKeepsAPhotoAndTheCardShowsIt() async throws {
        try await NutritionTestEnvironment.run { env in
            let user = try await env.user()
            let plain = try #require(try await env.meal(user, name: "Plain dinner")["id"] as? String)
            let pictured = try #require(try await env.meal(user, name: "Plain dinner")["id"] as? String)
            let upload = try await env.call(
                .post, "/v1/meals/\(pictured)/photo", as: user, raw: ByteBuffer(bytes: try Photos.fixture("meals/plate.png")), headers: [.contentType: "image/png"])
            #expect(upload.status == .ok)
            let owned = Array(buffer: try await env.call(.get, "/v1/meals/\(pictured)/photo", as: user).body)

            func share(_ id: String) async throws -> String {
                let reply = try await env.call(.post, "/v1/meals/\(id)/share", as: user)
                try #require(reply.status == .created, "\(reply.text)")
                return try #require(reply.json["token"] as? String)
            }
            let withPhoto = try await share(pictured)
            let without = try await share(plain)

            let snapshot = try await env.call(.get, "/v1/shared/\(withPhoto)")
            #expect(snapshot.json["photo_url"] as? String == "/v1/shared/\(withPhoto)/photo", "the link's copy, not the owner's path")
            // The token is kept only as its hash: not in the snapshot either.
            #expect(try await env.count("SELECT count(*) FROM shares WHERE snapshot::text LIKE '%\(withPhoto)%'") == 0)
            #expect(try await env.call(.get, "/v1/shared/\(without)").json["photo_url"] is NSNull)
            let shared = try await env.call(.get, "/v1/shared/\(withPhoto)/photo")
            #expect(shared.status == .ok)
            #expect(shared.headers[.contentType] == "image/jpeg")
            #expect(shared.headers[.cacheControl]?.hasPrefix("public") == true)
            #expect(Array(buffer: shared.body) == owned)
            let none = try await env.call(.get, "/v1/shared/\(without)/photo")
            #expect(none.status == .notFound)
            #expect(none.code == "photo_not_found")
            #expect(try await env.call(.get, "/v1/shared/unknown-token/photo").code == "share_not_found")

            // The card: with the photo on its left, the mean colour there is the cropped photo's;
            // without one that space is the card's light background and text, as before.
            let card = try await env.call(.get, "/v1/shared/\(withPhoto)/card.png")
            let plainCard = try await env.call(.get, "/v1/shared/\(without)/card.png")
            #expect(card.status == .ok && plainCard.status == .ok)
            let drawn = try CleanImage.rgb(Array(buffer: card.body))
            let drawnPlain = try CleanImage.rgb(Array(buffer: plainCard.body))
            #expect(drawn.width == 1200 && drawn.height == 630)
            let cover = try CleanImage.rgb(try CleanImage.coverPNG(ByteBuffer(bytes: owned), width: 440, height: 616))
            let photoArea = (x: 0..<440, y: 0..<616)
            let expected = Photos.mean(cover, x: 0..<440, y: 0..<616)
            let left = Photos.mean(drawn, x: photoArea.x, y: photoArea.y)
            #expect(Photos.close(left, expected, within: 3), "\(left) vs \(expected)")
            let plainLeft = Photos.mean(drawnPlain, x: photoArea.x, y: photoArea.y)
            #expect(!Photos.close(plainLeft, expected, within: 15), "\(plainLeft)")
            // Above the middle of the photo, the plate's white disc.
            #expect(Photos.close(Photos.mean(drawn, x: 212..<228, y: 130..<144), (240, 240, 235), within: 10))
            // Beside the photo the meal is still drawn: the name's dark ink and the score badge's ring.
            let right = Photos.mean(drawn, x: 440..<1200, y: 0..<616)
            #expect(right.0 < 250 && right.0 > 150, "\(right)")
            #expect(Photos.close(Photos.mean(drawn, x: 0..<1200, y: 620..<630), Photos.mean(drawnPlain, x: 0..<1200, y: 620..<630), within: 1), "the band's strip")
            #expect(card.body != plainCard.body)

            // The copy stays as it was when shared: the owner's later removal does not reach it.
            #expect(try await env.call(.delete, "/v1/meals/\(pictured)/photo", as: user).status == .noContent)
            #expect(Array(buffer: try await env.call(.get, "/v1/shared/\(withPhoto)/photo").body) == owned)
            // Revoked: gone, photo and all.
            #expect(try await env.call(.delete, "/v1/meals/\(pictured)/share", as: user).status == .noContent)
            let gone = try await env.call(.get, "/v1/shared/\(withPhoto)/photo")
            #expect(gone.status == .gone)
            #expect(gone.code == "share_gone")
            #expect(try await env.count("SELECT count(*) FROM shares WHERE photo IS NOT NULL") == 0)
        }
    }

    /// Each link keeps a copy of the photo: a meal has at most ten live links, an expired link's
    /// copy goes when the meal's links are next made, and revoking them deletes every copy, the
    /// expired links' too.
    @Test func aMealsLinksAndTheirCopiesAreBounded() async throws {
        try await NutritionTestEnvironment.run { env in
            let user = try await env.user()
            let meal = try #require(try await env.meal(user, name: "Shared a lot")["id"] as? String)
            let upload = try await env.call(
                .post, "/v1/meals/\(meal)/photo", as: user, raw: ByteBuffer(bytes: try Photos.fixture("meals/plate.png")), headers: [.contentType: "image/png"])
            #expect(upload.status == .ok)
            for _ in 0..<ShareStore.maxLiveLinks {
                #expect(try await env.call(.post, "/v1/meals/\(meal)/share", as: user).status == .created)
            }
            let over = try await env.call(.post, "/v1/meals/\(meal)/share", as: user)
            #expect(over.status == .conflict && over.code == "share_limit", "\(over.text)")
            let copies = "SELECT count(*) FROM shares WHERE meal_id = '\(meal)' AND photo IS NOT NULL"
            #expect(try await env.count(copies) == ShareStore.maxLiveLinks)

            // Three links expire: their copies go with the next link, which now fits.
            try await env.execute(
                "UPDATE shares SET expires_at = now() - interval '1 second' WHERE token_hash IN (SELECT token_hash FROM shares WHERE meal_id = '\(meal)' LIMIT 3)")
            #expect(try await env.call(.post, "/v1/meals/\(meal)/share", as: user).status == .created)
            #expect(try await env.count(copies) == ShareStore.maxLiveLinks - 3 + 1)

            // Revoking ends the live links and deletes every copy.
            #expect(try await env.call(.delete, "/v1/meals/\(meal)/share", as: user).status == .noContent)
            #expect(try await env.count(copies) == 0)
            // With every link expired, nothing is live to revoke, and the copies still go.
            #expect(try await env.call(.post, "/v1/meals/\(meal)/share", as: user).status == .created)
            try await env.execute("UPDATE shares SET expires_at = now() - interval '1 second' WHERE meal_id = '\(meal)'")
            #expect(try await env.call(.delete, "/v1/meals/\(meal)/share", as: user).code == "share_not_found")
            #expect(try await env.count(copies) == 0)
            #expect(try await env.count("SELECT count(*) FROM shares WHERE meal_id = '\(meal)' AND card_png IS NOT NULL") == 0)
        }
    }
}
