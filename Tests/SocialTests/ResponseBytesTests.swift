import Foundation
import Models
@testable import Social
import Testing
import TestSupport

/// Answers byte for byte: unset fields written as `null` where the document requires them, left out
/// where a viewer may not see them, keys sorted, whatever writes them.
@Suite struct SocialResponseBytesTests {
    @Test func aProfileAndAListOfProfilesAreWrittenWithTheirNulls() async throws {
        try await SocialTestEnvironment.run { env in
            let reader = try await env.user("Ana")
            let star = try await env.user()
            #expect(try await env.follow(star, as: reader).status.code < 300)
            let profile = try await env.profile(star, as: reader)
            let createdAt = try #require(profile.json["created_at"] as? String)
            #expect(
                profile.text
                    == #"{"allergies":[],"avatar_url":null,"cooking_preferences":{},"created_at":"\#(createdAt)","dietary_preferences":[],"display_name":null,"#
                    + #""favorite_cuisines":[],"followers_count":1,"following_count":0,"id":"\#(star.path)","is_private":false,"is_verified":false,"#
                    + #""relationship":{"blocked_by":false,"blocking":false,"followed_by":false,"following":true,"muting":false,"requested":false},"username":null}"#)
            let followers = try await env.call(.get, "/v1/profiles/\(star.path)/followers", as: reader)
            let followedAt = try #require(followers.items.first?["followed_at"] as? String)
            #expect(
                followers.text
                    == #"{"items":[{"avatar_url":null,"display_name":"Ana","followed_at":"\#(followedAt)","id":"\#(reader.path)","is_verified":false,"username":null}],"next_cursor":null}"#
            )
            // The owner sees the fields others may not, and no relationship.
            let own = try await env.profile(reader, as: reader)
            let (ownCreatedAt, ownUpdatedAt) = (try #require(own.json["created_at"] as? String), try #require(own.json["updated_at"] as? String))
            #expect(
                own.text
                    == #"{"allergies":[],"avatar_url":null,"cooking_preferences":{},"created_at":"\#(ownCreatedAt)","dietary_preferences":[],"#
                    + #""dietary_visibility":"followers_only","display_name":"Ana","favorite_cuisines":[],"followers_count":0,"following_count":1,"#
                    + #""id":"\#(reader.path)","is_hidden":false,"is_private":false,"is_verified":false,"updated_at":"\#(ownUpdatedAt)","username":null}"#)
        }
    }
}
