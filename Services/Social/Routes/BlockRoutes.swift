import Foundation
import Hummingbird
import ServiceKit

struct BlockState: Codable, Sendable {
    var blocking: Bool
}

struct MuteState: Codable, Sendable {
    var muting: Bool
    /// When the mute ends by itself; absent for a mute without end.
    var until: Date?
}

/// Blocks (separate two people for good) and mutes (silence someone's notifications for a while).
struct BlockRoutes {
    let social: Social

    func add(to router: Router<ServiceRequestContext>) {
        let profiles = router.group("v1/profiles", context: AuthenticatedContext.self)
        profiles.post(":id/block", use: block)
        profiles.delete(":id/block", use: unblock)
        profiles.post(":id/mute", use: mute)
        profiles.delete(":id/mute", use: unmute)
        router.group("v1/blocks", context: AuthenticatedContext.self).get(use: blocks)
        router.group("v1/mutes", context: AuthenticatedContext.self).get(use: mutes)
    }

    /// Blocks a profile: follows and requests end both ways, the blocked person's notifications to the
    /// blocker go, and `block.created` tells other services to hide content.
    @Sendable func block(_ request: Request, context: AuthenticatedContext) async throws -> BlockState {
        let target = try context.profileID()
        let caller = context.caller
        guard target != caller.userID else { throw APIError.conflict("You cannot block yourself.", code: "cannot_block_self") }
        let social = self.social
        let logger = context.logger
        return try await social.transaction(logger: logger) { connection in
            try await social.lockPair(caller: caller, with: target, on: connection, logger: logger)
            // Someone who blocks the caller does not exist for the caller (404, as for no profile at
            // all), unless the caller blocked them first: blocking again then changes nothing. A
            // profile moderators hid can be blocked: it may follow the caller still.
            if try await !social.blocks.isBlocking(caller.userID, target, on: connection, logger: logger) {
                try await social.blockableProfile(target, by: caller, on: connection, logger: logger)
            }
            if try await social.blocks.block(caller.userID, target, on: connection, logger: logger) {
                for (follower, followee) in try await social.follows.separate(caller.userID, target, on: connection, logger: logger) {
                    try await social.outbox.write(FollowRemoved(followerID: follower, followeeID: followee, reason: .block), userID: follower, on: connection, logger: logger)
                }
                try await social.notifications.removeAll(for: caller.userID, from: target, on: connection, logger: logger)
                try await social.notifications.removeAll(for: target, from: caller.userID, on: connection, logger: logger)
                try await social.outbox.write(BlockCreated(blockerID: caller.userID, blockedID: target), userID: caller.userID, on: connection, logger: logger)
            }
            return BlockState(blocking: true)
        }
    }

    @Sendable func unblock(_ request: Request, context: AuthenticatedContext) async throws -> BlockState {
        let target = try context.profileID()
        let caller = context.caller
        let social = self.social
        let logger = context.logger
        return try await social.transaction(logger: logger) { connection in
            try await social.follows.lockPair(caller.userID, target, on: connection, logger: logger)
            if try await social.blocks.unblock(caller.userID, target, on: connection, logger: logger) {
                try await social.outbox.write(BlockRemoved(blockerID: caller.userID, blockedID: target), userID: caller.userID, on: connection, logger: logger)
            } else {
                // Nothing to lift: 404 for no profile, and alike for one whose owner blocks the caller.
                _ = try await social.visibleProfile(target, to: caller, on: connection, logger: logger)
            }
            return BlockState(blocking: false)
        }
    }

    struct MuteRequest: StrictJSONBody {
        var durationSeconds: Int?
        enum CodingKeys: String, CodingKey, CaseIterable { case durationSeconds = "duration_seconds" }
    }

    /// Mutes for good, or for `duration_seconds` (a minute to a year). Muting again sets a new end.
    @Sendable func mute(_ request: Request, context: AuthenticatedContext) async throws -> MuteState {
        let target = try context.profileID()
        let caller = context.caller
        guard target != caller.userID else { throw APIError.conflict("You cannot mute yourself.", code: "cannot_mute_self") }
        let body = try await request.decodeIfPresent(as: MuteRequest.self, context: context)
        var until: Date?
        if let seconds = body?.durationSeconds {
            guard (60...31_536_000).contains(seconds) else {
                throw APIError.validation([.init(field: "duration_seconds", message: "must be from 60 (a minute) to 31536000 (a year)")])
            }
            until = Date().addingTimeInterval(TimeInterval(seconds))
        }
        let social = self.social
        let logger = context.logger
        return try await social.transaction(logger: logger) { connection in
            _ = try await social.ownProfile(caller, on: connection, logger: logger)
            _ = try await social.visibleProfile(target, to: caller, on: connection, logger: logger)
            try await social.blocks.mute(caller.userID, target, until: until, on: connection, logger: logger)
            return MuteState(muting: true, until: until)
        }
    }

    @Sendable func unmute(_ request: Request, context: AuthenticatedContext) async throws -> MuteState {
        let target = try context.profileID()
        let social = self.social
        try await social.postgres.withConnectionOnItsLoop { connection in
            // 404 as anywhere else for someone who blocks the caller or is hidden, muted or not: the
            // answer must not tell them from someone who does not exist, and the mute stays, to show
            // again if they unblock.
            _ = try await social.visibleProfile(target, to: context.caller, on: connection, logger: context.logger)
            _ = try await social.blocks.unmute(context.caller.userID, target, on: connection, logger: context.logger)
        }
        return MuteState(muting: false, until: nil)
    }

    @Sendable func blocks(_ request: Request, context: AuthenticatedContext) async throws -> Page<ListedProfile> {
        let social = self.social
        return try await social.page(request) { connection, limit, after in
            try await social.blocks.blocks(of: context.caller.userID, limit: limit, after: after, on: connection, logger: context.logger)
        }
    }

    @Sendable func mutes(_ request: Request, context: AuthenticatedContext) async throws -> Page<ListedProfile> {
        let social = self.social
        return try await social.page(request) { connection, limit, after in
            try await social.blocks.mutes(of: context.caller.userID, limit: limit, after: after, on: connection, logger: context.logger)
        }
    }
}
