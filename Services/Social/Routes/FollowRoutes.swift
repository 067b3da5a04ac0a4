import Foundation
import HTTPTypes
import Hummingbird
import ServiceKit

struct FollowState: Codable, Sendable {
    /// `following`, `requested` or `none`.
    var state: String
}

/// Following, unfollowing, the lists of followers and following, and follow requests.
struct FollowRoutes {
    let social: Social

    func add(to router: Router<ServiceRequestContext>) {
        let profiles = router.group("v1/profiles", context: AuthenticatedContext.self)
        profiles.post(":id/follow", use: follow)
        profiles.delete(":id/follow", use: unfollow)
        profiles.get(":id/followers", use: { request, context in try await list(.followers, request, context: context) })
        profiles.get(":id/following", use: { request, context in try await list(.following, request, context: context) })
        profiles.delete("me/followers/:id", use: removeFollower)
        let requests = router.group("v1/follow-requests", context: AuthenticatedContext.self)
        requests.get(use: incoming)
        requests.post(":id/approve", use: approve)
        requests.post(":id/deny", use: deny)
    }

    static let callerHidden = APIError(
        .forbidden, code: "profile_hidden", detail: "Your profile is hidden by moderators: it cannot follow or ask to follow anyone while it is.")

    /// Follows a public profile, or asks to follow a private one. Following twice is the same as once.
    /// A profile moderators hid does neither: nobody would see it among their followers or requests.
    @Sendable func follow(_ request: Request, context: AuthenticatedContext) async throws -> FollowState {
        let target = try context.profileID()
        let caller = context.caller
        guard target != caller.userID else { throw APIError.conflict("You cannot follow yourself.", code: "cannot_follow_self") }
        let social = self.social
        let logger = context.logger
        try await social.countFollowAction(by: caller.userID, logger: logger)
        return try await social.transaction(logger: logger) { connection in
            try await social.lockPair(caller: caller, with: target, on: connection, logger: logger)
            let (profile, relationship) = try await social.visibleProfile(target, to: caller, on: connection, logger: logger)
            if relationship.blockedBy { throw APIError.notFound("No such profile.") }
            if try await social.follows.isHidden(caller.userID, on: connection, logger: logger) { throw Self.callerHidden }
            if relationship.blocking { throw APIError.conflict("You block this profile; unblock it before following.", code: "blocking") }
            if relationship.following { return FollowState(state: "following") }
            if profile.isPrivate {
                if try await social.follows.request(caller.userID, target, on: connection, logger: logger) {
                    try await social.outbox.write(FollowRequested(requesterID: caller.userID, targetID: target), userID: caller.userID, on: connection, logger: logger)
                    try await social.notifications.notify(target, .followRequest, actor: caller.userID, on: connection, logger: logger)
                }
                return FollowState(state: "requested")
            }
            if try await social.follows.follow(caller.userID, target, on: connection, logger: logger) {
                try await social.outbox.write(FollowCreated(followerID: caller.userID, followeeID: target), userID: caller.userID, on: connection, logger: logger)
                try await social.notifications.notify(target, .follow, actor: caller.userID, on: connection, logger: logger)
            }
            return FollowState(state: "following")
        }
    }

    /// Unfollows, or withdraws a pending request, and takes back the notification the follow or the
    /// request made. Unfollowing someone you do not follow is not an error.
    @Sendable func unfollow(_ request: Request, context: AuthenticatedContext) async throws -> FollowState {
        let target = try context.profileID()
        let caller = context.caller
        let social = self.social
        let logger = context.logger
        try await social.countFollowAction(by: caller.userID, logger: logger)
        return try await social.transaction(logger: logger) { connection in
            try await social.follows.lockPair(caller.userID, target, on: connection, logger: logger)
            if try await social.follows.unfollow(caller.userID, target, on: connection, logger: logger) {
                try await social.outbox.write(FollowRemoved(followerID: caller.userID, followeeID: target, reason: .unfollow), userID: caller.userID, on: connection, logger: logger)
                // As a withdrawn request's: a follow undone is no news, and following and unfollowing
                // in a loop leaves the target one notification at most, not one per round.
                try await social.notifications.retract(target, .follow, actor: caller.userID, on: connection, logger: logger)
            } else if try await social.follows.removeRequest(caller.userID, target, on: connection, logger: logger) {
                try await social.notifications.retract(target, .followRequest, actor: caller.userID, on: connection, logger: logger)
            } else {
                // Nothing to undo: 404 as anywhere else for someone who blocks the caller or is hidden.
                _ = try await social.visibleProfile(target, to: caller, on: connection, logger: logger)
            }
            return FollowState(state: "none")
        }
    }

    /// Removes one of the caller's followers without blocking them (a private account's way to take
    /// back an approval): counts are corrected, `follow.removed` says so, nobody is notified, and the
    /// notification the follow made goes. They may ask again (a private account decides again).
    @Sendable func removeFollower(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let follower = try context.profileID()
        let caller = context.caller
        let social = self.social
        let logger = context.logger
        return try await social.transaction(logger: logger) { connection in
            try await social.follows.lockPair(caller.userID, follower, on: connection, logger: logger)
            guard try await social.follows.unfollow(follower, caller.userID, on: connection, logger: logger) else {
                throw APIError.notFound("This user does not follow you.")
            }
            try await social.outbox.write(FollowRemoved(followerID: follower, followeeID: caller.userID, reason: .removed), userID: follower, on: connection, logger: logger)
            try await social.notifications.retract(caller.userID, .follow, actor: follower, on: connection, logger: logger)
            return .noContent
        }
    }

    /// Followers or following of a profile, newest first. A private profile's lists are for its
    /// accepted followers.
    @Sendable func list(_ direction: FollowStore.Direction, _ request: Request, context: AuthenticatedContext) async throws -> Page<ListedProfile> {
        let id = try context.profileID()
        let social = self.social
        let caller = context.caller
        return try await social.page(request) { connection, limit, after in
            let (profile, relationship) = try await social.visibleProfile(id, to: caller, on: connection, logger: context.logger)
            guard ProfileView.listsVisible(profile, relationship: relationship, isOwner: id == caller.userID, isStaff: caller.isStaff) else {
                throw APIError(.forbidden, code: "private_profile", detail: "This profile is private; its lists are for its followers.")
            }
            return try await social.follows.list(direction, of: id, viewer: caller.userID, viewerIsStaff: caller.isStaff, limit: limit, after: after, on: connection, logger: context.logger)
        }
    }

    @Sendable func incoming(_ request: Request, context: AuthenticatedContext) async throws -> Page<ListedProfile> {
        let social = self.social
        return try await social.page(request) { connection, limit, after in
            try await social.follows.incomingRequests(to: context.caller.userID, limit: limit, after: after, on: connection, logger: context.logger)
        }
    }

    /// Accepts the request of the user `:id` to follow the caller; one from a profile moderators hid
    /// since is not among the caller's requests, and is not found.
    @Sendable func approve(_ request: Request, context: AuthenticatedContext) async throws -> FollowState {
        let requester = try context.profileID()
        let caller = context.caller
        let social = self.social
        let logger = context.logger
        return try await social.transaction(logger: logger) { connection in
            try await social.follows.lockPair(caller.userID, requester, on: connection, logger: logger)
            guard try await !social.follows.isHidden(requester, on: connection, logger: logger),
                try await social.follows.removeRequest(requester, caller.userID, on: connection, logger: logger)
            else {
                throw APIError.notFound("No pending follow request from this user.")
            }
            try await social.notifications.retract(caller.userID, .followRequest, actor: requester, on: connection, logger: logger)
            if try await social.follows.follow(requester, caller.userID, on: connection, logger: logger) {
                try await social.outbox.write(FollowCreated(followerID: requester, followeeID: caller.userID), userID: requester, on: connection, logger: logger)
                try await social.notifications.notify(requester, .followAccepted, actor: caller.userID, on: connection, logger: logger)
            }
            return FollowState(state: "following")
        }
    }

    @Sendable func deny(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let requester = try context.profileID()
        let caller = context.caller
        let social = self.social
        let logger = context.logger
        try await social.transaction(logger: logger) { connection in
            try await social.follows.lockPair(caller.userID, requester, on: connection, logger: logger)
            guard try await social.follows.removeRequest(requester, caller.userID, on: connection, logger: logger) else {
                throw APIError.notFound("No pending follow request from this user.")
            }
            try await social.notifications.retract(caller.userID, .followRequest, actor: requester, on: connection, logger: logger)
        }
        return .noContent
    }
}
