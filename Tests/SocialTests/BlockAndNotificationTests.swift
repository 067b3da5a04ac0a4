import Foundation
import HTTPTypes
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

@Suite struct BlockAndNotificationTests {
    @Test func aBlockSeparatesBothWaysAndPreventsNewFollows() async throws {
        try await SocialTestEnvironment.run { env in
            let a = try await env.user()
            let b = try await env.user()
            _ = try await env.follow(b, as: a)
            _ = try await env.follow(a, as: b)
            let blocked = try await env.call(.post, "/v1/profiles/\(b.path)/block", as: a)
            #expect(blocked.status == .ok && blocked.json["blocking"] as? Bool == true)
            #expect(try await env.call(.post, "/v1/profiles/\(b.path)/block", as: a).status == .ok)
            #expect(try await env.count("SELECT count(*) FROM follows WHERE '\(a.id)' IN (follower_id, followee_id)") == 0)
            let mine = try await env.call(.get, "/v1/profiles/me", as: a).json
            #expect(mine["followers_count"] as? Int == 0 && mine["following_count"] as? Int == 0)
            // b no longer sees a; a sees b but cannot follow until unblocking.
            #expect(try await env.profile(a, as: b).status == .notFound)
            #expect(try await env.call(.get, "/v1/profiles/\(a.path)/followers", as: b).status == .notFound)
            #expect(try await env.follow(a, as: b).status == .notFound)
            let refused = try await env.follow(b, as: a)
            #expect(refused.status == .conflict && refused.code == "blocking")
            // To b, a no longer exists: blocking or unblocking a answers exactly as for no profile at all.
            let nowhere = UUID().uuidString.lowercased()
            for method in [HTTPRequest.Method.post, .delete] {
                let aboutA = try await env.call(method, "/v1/profiles/\(a.path)/block", as: b)
                let aboutNobody = try await env.call(method, "/v1/profiles/\(nowhere)/block", as: b)
                #expect(aboutA.status == .notFound && aboutA.status == aboutNobody.status && aboutA.code == aboutNobody.code, "\(method)")
                #expect(aboutA.json["detail"] as? String == aboutNobody.json["detail"] as? String, "\(method)")
            }
            #expect(try await env.call(.get, "/v1/blocks", as: a).ids == [b.path])
            #expect(try await env.call(.get, "/v1/blocks", as: b).ids.isEmpty)
            try await waitUntil(.seconds(10)) { try await env.events(FollowRemoved.eventType).count == 2 }
            #expect(try await env.events(BlockCreated.eventType).count == 1)
            #expect(try await env.call(.post, "/v1/profiles/\(a.path)/block", as: a).code == "cannot_block_self")
            #expect(try await env.call(.post, "/v1/profiles/\(UUID().uuidString)/block", as: a).status == .notFound)

            #expect(try await env.call(.delete, "/v1/profiles/\(b.path)/block", as: a).json["blocking"] as? Bool == false)
            #expect(try await env.call(.get, "/v1/blocks", as: a).ids.isEmpty)
            #expect(try await env.follow(b, as: a).json["state"] as? String == "following")
        }
    }

    @Test func notificationsAreStoredPublishedLiveAndReadByTheirOwnerOnly() async throws {
        try await SocialTestEnvironment.run { env in
            let star = try await env.user()
            let fan = try await env.user("Fan")
            let subscriber = RedisSubscriber(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
            let live = subscriber.subscribe("user:\(star.path)")
            let listening = Task { try await subscriber.run() }
            defer { listening.cancel() }
            // Subscribed once a publish reaches it; the probes are skipped below.
            try await waitUntil { try await env.redis.publish("user:\(star.path)", "{}") > 0 }

            _ = try await env.follow(star, as: fan)
            let list = try await env.call(.get, "/v1/notifications", as: star)
            #expect(list.items.count == 1)
            let first = try #require(list.items.first)
            #expect(first["type"] as? String == "follow" && first["read"] as? Bool == false)
            #expect(((first["actor"] as? [String: Any])?["id"] as? String)?.lowercased() == fan.path)
            let message = try await withTimeout(.seconds(10)) { () -> RedisMessage? in
                for await message in live where message.text != "{}" { return message }
                return nil
            }
            #expect(message?.text.contains(NotificationCreated.eventType) == true)
            #expect(message?.text.lowercased().contains(fan.path) == true)

            #expect(try await env.call(.get, "/v1/notifications/unread-count", as: star).json["unread"] as? Int == 1)
            let id = try #require(first["id"] as? String)
            // The fan cannot mark the star's notification read.
            #expect(try await env.call(.post, "/v1/notifications/read", as: fan, json: ["ids": [id]]).json["updated"] as? Int == 0)
            #expect(try await env.call(.get, "/v1/notifications?unread=true", as: star).items.count == 1)
            let read = try await env.call(.post, "/v1/notifications/read", as: star, json: ["ids": [id]])
            #expect(read.json["updated"] as? Int == 1 && read.json["unread"] as? Int == 0)
            #expect(try await env.call(.get, "/v1/notifications?unread=true", as: star).items.isEmpty)
            #expect(try await env.call(.get, "/v1/notifications", as: star).items.first?["read"] as? Bool == true)
            #expect(try await env.call(.get, "/v1/notifications", as: fan).items.isEmpty)

            for bad: Any in [["ids": []], ["all": false], ["ids": ["nope"]], ["ids": [id], "all": true], [String: Any]()] {
                #expect(try await env.call(.post, "/v1/notifications/read", as: star, json: bad).status == .badRequest, "\(bad)")
            }
            // A misspelt key is refused, naming it, rather than ignored.
            #expect(try await env.call(.post, "/v1/notifications/read", as: star, json: ["all": true, "unread_only": true]).fieldErrors == ["unread_only"])
            #expect(try await env.call(.get, "/v1/notifications?unread=maybe", as: star).status == .badRequest)
            // An unread one, which none of the refused requests below may touch.
            let second = try await env.user()
            _ = try await env.follow(star, as: second)
            let tooMany = (0...100).map { _ in UUID().uuidString }
            #expect(try await env.call(.post, "/v1/notifications/read", as: star, json: ["ids": tooMany]).status == .badRequest)
            let json: HTTPFields = [.contentType: "application/json"]
            #expect(try await env.call(.post, "/v1/notifications/read", as: star, raw: ByteBuffer(string: "{\"ids\": ["), headers: json).code == "malformed_json")
            #expect(try await env.call(.post, "/v1/notifications/read", as: star, raw: ByteBuffer(), headers: json).code == "malformed_json")
            #expect(
                try await env.call(
                    .post, "/v1/notifications/read", as: star, raw: ByteBuffer(string: "all=true"),
                    headers: [.contentType: "application/x-www-form-urlencoded"]
                ).code == "unsupported_media_type")
            let huge = ByteBuffer(string: "{\"ids\": [\"" + String(repeating: "a", count: 3 << 20) + "\"]}")
            let oversized = try await env.call(.post, "/v1/notifications/read", as: star, raw: huge, headers: json)
            #expect(oversized.status == .contentTooLarge && oversized.code == "payload_too_large")
            // None of these touched it.
            #expect(try await env.call(.get, "/v1/notifications?unread=true", as: star).items.count == 1)
            #expect(try await env.call(.get, "/v1/notifications/unread-count", as: star).json["unread"] as? Int == 1)
            #expect(try await env.call(.post, "/v1/notifications/read", as: star, json: ["all": true]).status == .ok)

            // Pages, newest first, by the cursor each page gives.
            var fans = [fan, second]
            for _ in 0..<4 {
                let another = try await env.user()
                _ = try await env.follow(star, as: another)
                fans.append(another)
            }
            var seen: [String] = []
            var cursor: String?
            repeat {
                let page = try await env.call(.get, "/v1/notifications?limit=2" + (cursor.map { "&cursor=\($0)" } ?? ""), as: star)
                #expect(page.status == .ok && page.items.count <= 2)
                seen += page.items.compactMap { ($0["actor"] as? [String: Any])?["id"] as? String }.map { $0.lowercased() }
                cursor = page.json["next_cursor"] as? String
            } while cursor != nil
            #expect(seen == fans.reversed().map(\.path))
            #expect(try await env.call(.get, "/v1/notifications/unread-count", as: star).json["unread"] as? Int == 4)

            // Following and unfollowing in a loop: an unfollow takes its follow's notification back,
            // so the star holds one from this fan at most, never one per round.
            let fickle = try await env.user()
            for _ in 0..<5 {
                _ = try await env.follow(star, as: fickle)
                #expect(try await env.call(.delete, "/v1/profiles/\(star.path)/follow", as: fickle).json["state"] as? String == "none")
            }
            _ = try await env.follow(star, as: fickle)
            let fromFickle = try await env.call(.get, "/v1/notifications?limit=100", as: star).items.filter {
                (($0["actor"] as? [String: Any])?["id"] as? String)?.lowercased() == fickle.path
            }
            #expect(fromFickle.count == 1)
            #expect(try await env.call(.get, "/v1/notifications/unread-count", as: star).json["unread"] as? Int == 5)
        }
    }

    @Test func mutedAndBlockedPeopleCauseNoNotifications() async throws {
        try await SocialTestEnvironment.run { env in
            let star = try await env.user()
            let muted = try await env.user()
            let briefly = try await env.user()
            let blocked = try await env.user()
            let subscriber = RedisSubscriber(configuration: try TestEnvironment.redis(), logger: TestEnvironment.logger)
            let live = subscriber.subscribe("user:\(star.path)")
            let listening = Task { try await subscriber.run() }
            defer { listening.cancel() }
            // Subscribed once a publish reaches it; the probes are skipped below.
            try await waitUntil { try await env.redis.publish("user:\(star.path)", "{}") > 0 }
            let mute = try await env.call(.post, "/v1/profiles/\(muted.path)/mute", as: star)
            #expect(mute.status == .ok && mute.json["muting"] as? Bool == true && mute.json["until"] == nil)
            #expect(try await env.call(.post, "/v1/profiles/\(muted.path)/mute", as: star).json["muting"] as? Bool == true)
            let timed = try await env.call(.post, "/v1/profiles/\(briefly.path)/mute", as: star, json: ["duration_seconds": 3600])
            #expect(timed.json["until"] != nil)
            #expect(try await env.call(.post, "/v1/profiles/\(briefly.path)/mute", as: star, json: ["duration_seconds": 5]).status == .badRequest)
            #expect(try await env.call(.post, "/v1/profiles/\(briefly.path)/mute", as: star, json: ["duration_seconds": "1h"]).status == .badRequest)
            // A misspelt duration would otherwise be a mute for ever.
            let misspelt = try await env.call(.post, "/v1/profiles/\(briefly.path)/mute", as: star, json: ["duration": 3600])
            #expect(misspelt.status == .badRequest && misspelt.fieldErrors == ["duration"], "\(misspelt.text)")
            #expect(try await env.profile(briefly, as: star).json[path: "relationship.muting"] as? Bool == true)
            #expect(try await env.call(.post, "/v1/profiles/\(star.path)/mute", as: star).code == "cannot_mute_self")
            // No one to mute: an unknown id, a malformed one, and someone who blocks the caller
            // (who, to them, does not exist).
            #expect(try await env.call(.post, "/v1/profiles/\(UUID().uuidString)/mute", as: star).status == .notFound)
            #expect(try await env.call(.post, "/v1/profiles/not-an-id/mute", as: star).status == .notFound)
            let blocker = try await env.user()
            _ = try await env.call(.post, "/v1/profiles/\(star.path)/block", as: blocker)
            #expect(try await env.call(.post, "/v1/profiles/\(blocker.path)/mute", as: star).status == .notFound)
            #expect(try await env.call(.delete, "/v1/profiles/\(UUID().uuidString)/mute", as: star).status == .notFound)
            #expect(
                try await env.call(
                    .post, "/v1/profiles/\(muted.path)/mute", as: star, raw: ByteBuffer(string: "{\"duration_seconds\":"),
                    headers: [.contentType: "application/json"]
                ).status == .badRequest)
            _ = try await env.call(.post, "/v1/profiles/\(blocked.path)/block", as: star)
            #expect(Set(try await env.call(.get, "/v1/mutes", as: star).ids) == [muted.path, briefly.path])

            _ = try await env.follow(star, as: muted)
            _ = try await env.follow(star, as: briefly)
            #expect(try await env.follow(star, as: blocked).status == .notFound)
            #expect(try await env.call(.get, "/v1/notifications", as: star).items.isEmpty)
            // Muting hides notifications, not the follow.
            #expect(try await env.profile(star, as: muted).json["followers_count"] as? Int == 2)
            #expect(try await env.profile(muted, as: star).json[path: "relationship.muting"] as? Bool == true)

            // An ended mute no longer silences; unmuting does the same at once.
            _ = try await env.count("UPDATE mutes SET until = now() - interval '1 second' WHERE muted_id = '\(briefly.id)' RETURNING 1")
            _ = try await env.call(.delete, "/v1/profiles/\(star.path)/follow", as: briefly)
            _ = try await env.follow(star, as: briefly)
            #expect(try await env.call(.delete, "/v1/profiles/\(muted.path)/mute", as: star).json["muting"] as? Bool == false)
            #expect(try await env.call(.delete, "/v1/profiles/\(muted.path)/mute", as: star).json["muting"] as? Bool == false)
            _ = try await env.call(.delete, "/v1/profiles/\(star.path)/follow", as: muted)
            _ = try await env.follow(star, as: muted)
            #expect(
                Set(try await env.call(.get, "/v1/notifications", as: star).items.compactMap { ($0["actor"] as? [String: Any])?["id"] as? String }.map { $0.lowercased() }) == [
                    briefly.path, muted.path,
                ])
            // Nothing went out live while they were silenced either: the first message is the ended
            // mute's follow.
            let first = try await withTimeout(.seconds(10)) { () -> RedisMessage? in
                for await message in live where message.text != "{}" { return message }
                return nil
            }
            #expect(first?.text.lowercased().contains(briefly.path) == true)
            #expect(first?.text.lowercased().contains(muted.path) == false && first?.text.lowercased().contains(blocked.path) == false)
            #expect(try await env.call(.get, "/v1/mutes", as: star).ids.isEmpty)
        }
    }

    /// Someone who blocks the caller, and a profile moderators hid, appear in none of the caller's
    /// lists and counts; undoing a follow or mute of them that is not there is 404, as elsewhere.
    @Test func blockersAndHiddenProfilesLeaveNoTraceInTheCallersListsAndCounts() async throws {
        try await SocialTestEnvironment.run { env in
            let me = try await env.user()
            let blocker = try await env.user()
            let villain = try await env.user()
            let loud = try await env.user()
            let fan = try await env.user()
            let moderator = try await env.user(roles: [.user, .moderator])
            _ = try await env.call(.post, "/v1/profiles/\(blocker.path)/mute", as: me)
            _ = try await env.call(.post, "/v1/profiles/\(loud.path)/mute", as: me)
            _ = try await env.call(.post, "/v1/profiles/\(villain.path)/block", as: me)
            _ = try await env.follow(me, as: fan)
            #expect(Set(try await env.call(.get, "/v1/mutes", as: me).ids) == [blocker.path, loud.path])
            #expect(try await env.call(.get, "/v1/notifications/unread-count", as: me).json["unread"] as? Int == 1)

            // The muted person blocks me: my mute stays, unseen while they block me.
            _ = try await env.call(.post, "/v1/profiles/\(me.path)/block", as: blocker)
            #expect(try await env.call(.get, "/v1/mutes", as: me).ids == [loud.path])
            #expect(try await env.call(.delete, "/v1/profiles/\(blocker.path)/follow", as: me).status == .notFound)
            #expect(try await env.count("SELECT count(*) FROM mutes WHERE muter_id = '\(me.id)' AND muted_id = '\(blocker.id)'") == 1)
            // Unmuting them is 404, as for anyone who blocks me, and keeps the mute.
            #expect(try await env.call(.delete, "/v1/profiles/\(blocker.path)/mute", as: me).status == .notFound)
            #expect(try await env.count("SELECT count(*) FROM mutes WHERE muter_id = '\(me.id)' AND muted_id = '\(blocker.id)'") == 1)
            let stranger = try await env.user()
            _ = try await env.call(.post, "/v1/profiles/\(stranger.path)/block", as: blocker)
            #expect(try await env.call(.delete, "/v1/profiles/\(blocker.path)/mute", as: stranger).status == .notFound)
            _ = try await env.call(.delete, "/v1/profiles/\(me.path)/block", as: blocker)
            #expect(Set(try await env.call(.get, "/v1/mutes", as: me).ids) == [blocker.path, loud.path])

            // Moderators hide three of them: gone from my blocks, mutes, notifications and unread count.
            for user in [villain, loud, fan] {
                #expect(try await env.call(.post, "/v1/moderation/profiles/\(user.path)/hide", as: moderator).status == .ok)
            }
            #expect(try await env.call(.get, "/v1/blocks", as: me).ids.isEmpty)
            #expect(try await env.call(.get, "/v1/mutes", as: me).ids == [blocker.path])
            #expect(try await env.call(.get, "/v1/notifications", as: me).items.isEmpty)
            #expect(try await env.call(.get, "/v1/notifications/unread-count", as: me).json["unread"] as? Int == 0)
            #expect(try await env.call(.delete, "/v1/profiles/\(villain.path)/follow", as: me).status == .notFound)
            for user in [villain, loud, fan] {
                _ = try await env.call(.post, "/v1/moderation/profiles/\(user.path)/unhide", as: moderator)
            }
            #expect(try await env.call(.get, "/v1/blocks", as: me).ids == [villain.path])
            #expect(Set(try await env.call(.get, "/v1/mutes", as: me).ids) == [blocker.path, loud.path])
            #expect(try await env.call(.get, "/v1/notifications/unread-count", as: me).json["unread"] as? Int == 1)
        }
    }
}

/// The value of `body`, or nil when it takes longer than `limit`.
func withTimeout<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T?) async throws -> T? {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit); return nil
        }
        let first = try await group.next() ?? nil
        group.cancelAll()
        return first
    }
}
