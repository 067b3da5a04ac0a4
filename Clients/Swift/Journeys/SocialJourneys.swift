import FoodBackendAPI
import FoodBackendClient
import Foundation

/// Two users: one follows the other, who hears it on the live stream; then the lists, notifications,
/// a private profile's follow requests, mutes and blocks.
func aFollowIsHeardOnTheLiveStream() async throws {
    let cook = try await signUp("cook", displayName: "Stream Cook")
    let fan = try await signUp("fan", displayName: "Stream Fan")
    _ = try await eventually("the cook's profile, seen by the fan") {
        try? await fan.app.send { try await $0.getV1ProfilesId(path: .init(id: cook.id)).ok.body.json }
    }
    let stream = try await StreamReader(cook.app)
    defer { stream.close() }
    _ = try await fan.app.send { try await $0.postV1ProfilesIdFollow(path: .init(id: cook.id)).ok.body.json }
    let heard = try await stream.next("the follow's notification") { event -> LiveEvent.NotificationCreated? in
        if case .notification(let notification) = event.kind, notification.kind == "follow" { return notification }
        return nil
    }
    try expect(same(heard.actorId, fan.id) && same(heard.userId, cook.id), "the notification names both: \(heard)")

    // The notification is also stored: listed page by page, counted, marked read.
    let unread = try await cook.app.send { try await $0.getV1NotificationsUnreadCount().ok.body.json.unread }
    try expect(unread >= 1, "an unread notification")
    var notifications: [Components.Schemas.Notification] = []
    for try await notification in cook.app.pages({ api, cursor in
        let page = try await api.getV1Notifications(query: .init(limit: 1, cursor: cursor)).ok.body.json
        return (page.items, page.nextCursor)
    }) {
        notifications.append(notification)
    }
    try expect(notifications.contains { same($0.actor.id, fan.id) && $0._type == .follow }, "the follow among the notifications")
    _ = try await cook.app.send { try await $0.postV1NotificationsRead(body: .json(.case2(.init(all: true)))).ok.body.json }
    let after = try await cook.app.send { try await $0.getV1NotificationsUnreadCount().ok.body.json.unread }
    try expect(after == 0, "all read")

    let followers = try await cook.app.send { try await $0.getV1ProfilesIdFollowers(path: .init(id: cook.id)).ok.body.json }
    try expect(followers.items.contains { same($0.value1.id, fan.id) }, "the fan among the followers: \(followers)")
    let following = try await fan.app.send { try await $0.getV1ProfilesIdFollowing(path: .init(id: fan.id)).ok.body.json }
    try expect(following.items.contains { same($0.value1.id, cook.id) }, "the cook among the fan's follows")
    _ = try await fan.app.send { try await $0.deleteV1ProfilesIdFollow(path: .init(id: cook.id)).ok.body.json }

    // A private profile: follows become requests the owner approves or denies; a follower can be removed.
    _ = try await cook.app.send { try await $0.patchV1ProfilesMe(body: .json(.init(isPrivate: true))).ok.body.json }
    let asker = try await signUp("asker")
    let denied = try await signUp("denied")
    for user in [asker, denied] {
        _ = try await eventually("the private profile, seen by \(user.email)") {
            try? await user.app.send { try await $0.getV1ProfilesId(path: .init(id: cook.id)).ok.body.json }
        }
        _ = try await user.app.send { try await $0.postV1ProfilesIdFollow(path: .init(id: cook.id)).ok.body.json }
    }
    let requests = try await cook.app.send { try await $0.getV1FollowRequests().ok.body.json }
    try expect(requests.items.count == 2, "two follow requests: \(requests)")
    _ = try await cook.app.send { try await $0.postV1FollowRequestsIdApprove(path: .init(id: asker.id)).ok.body.json }
    _ = try await cook.app.send { try await $0.postV1FollowRequestsIdDeny(path: .init(id: denied.id)).noContent }
    _ = try await cook.app.send { try await $0.deleteV1ProfilesMeFollowersId(path: .init(id: asker.id)).noContent }

    // Mute for an hour, unmute; block, see the block list, unblock.
    _ = try await cook.app.send { try await $0.postV1ProfilesIdMute(path: .init(id: fan.id), body: .json(.init(durationSeconds: 3600))).ok.body.json }
    let mutes = try await cook.app.send { try await $0.getV1Mutes().ok.body.json }
    try expect(mutes.items.contains { same($0.value1.id, fan.id) }, "the fan muted")
    _ = try await cook.app.send { try await $0.deleteV1ProfilesIdMute(path: .init(id: fan.id)).ok.body.json }
    _ = try await cook.app.send { try await $0.postV1ProfilesIdBlock(path: .init(id: denied.id)).ok.body.json }
    let blocks = try await cook.app.send { try await $0.getV1Blocks().ok.body.json }
    try expect(blocks.items.contains { same($0.value1.id, denied.id) }, "the block listed")
    try await expectProblem("not_found", "a blocked user's view of the profile") {
        try await denied.app.send { try await $0.getV1ProfilesId(path: .init(id: cook.id)).ok.body.json }
    }
    _ = try await cook.app.send { try await $0.deleteV1ProfilesIdBlock(path: .init(id: denied.id)).ok.body.json }
}
