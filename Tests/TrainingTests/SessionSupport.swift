import Foundation
import HTTPTypes
import Models
import ServiceKit
import ServiceKitEvents
import Testing
import TestSupport
@testable import Training

/// What the session tests share: invitations' and auth's events put on the service's stream as
/// those services write them, a coach with a roster entry and a workout, and days in UTC.
extension TrainingTestEnvironment {
    /// The events of `type` written: the outbox holds them until relayed, then keeps copies.
    func written(_ type: String) async throws -> Int {
        try await count("SELECT count(*) FROM (SELECT type FROM outbox UNION ALL SELECT type FROM outbox_relayed) e WHERE type = '\(type)'")
    }

    func publish<Payload: EventPayload>(_ payload: Payload, userID: UUID?, producer: String = "invitations", sequence: Int64? = nil) async throws {
        try await EventStream(redis: redis, name: config.events.stream).publish(payload, producer: producer, userID: userID, sequence: sequence)
    }

    /// The envelopes of `type` on `user`'s live stream (what the gateway's event stream sends them).
    func live(_ type: String, to user: User) async throws -> [String] {
        try await LiveStream.read(for: user.id, after: nil, matching: [type], redis: redis).matching.map(\.envelope)
    }

    /// A roster entry of `coach`'s as invitations announces it (`client.invited`), once it is known here.
    func rosterEntry(of coach: User) async throws -> UUID {
        let entry = UUID()
        try await publish(ClientInvited(rosterEntryID: entry, coachID: coach.id), userID: coach.id)
        try await waitUntil(.seconds(10)) { try await count("SELECT count(*) FROM roster_entries WHERE id = '\(entry)'") == 1 }
        return entry
    }

    /// The acceptance of `entry` by `client`, as invitations announces it, once it has taken effect.
    func accept(_ entry: UUID, coach: User, client: User) async throws {
        try await publish(InvitationAccepted(invitationID: UUID(), coachID: coach.id, clientID: client.id, rosterEntryID: entry), userID: client.id)
        try await waitUntil(.seconds(10)) { try await count("SELECT count(*) FROM roster_entries WHERE id = '\(entry)' AND client_id = '\(client.id)'") == 1 }
    }

    /// A coach, a client linked through a roster entry, and a workout of the coach's.
    func coachWithClient(sets: Int = 3) async throws -> (coach: User, client: User, entry: UUID, workout: String) {
        let invited = try await coachWithInvitedClient(sets: sets)
        try await accept(invited.entry, coach: invited.coach, client: invited.client)
        return invited
    }

    /// A coach with a workout, and a roster entry for `client` that no acceptance has reached yet.
    func coachWithInvitedClient(sets: Int = 3) async throws -> (coach: User, client: User, entry: UUID, workout: String) {
        let coach = try await coach()
        let client = try await client()
        let entry = try await rosterEntry(of: coach)
        let press = try await libraryExercise("Pushups")
        let created = try await call(.post, "/v1/workouts", as: coach, json: Self.workout(press, sets: sets))
        try #require(created.status == .created, "\(created.text)")
        return (coach, client, entry, try #require(created.json["id"] as? String))
    }

    func assign(_ workout: String, to entry: UUID, by coach: User, on days: [String]) async throws -> [String] {
        let reply = try await call(.post, "/v1/training/clients/\(entry)/assignments", as: coach, json: ["workout_id": workout, "dates": days])
        try #require(reply.status == .created, "\(reply.text)")
        return reply.ids
    }

    /// The day `offset` days from today in UTC, `YYYY-MM-DD`.
    /// `moment` as RFC 3339 with its offset (UTC), as a log's `performed_at` takes it.
    static func moment(_ moment: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd'T'HH:mm:ssxxx"
        return formatter.string(from: moment)
    }

    static func day(_ offset: Int, in zone: String = "UTC") -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: zone)!
        let date = calendar.date(byAdding: .day, value: offset, to: Date())!
        let c = calendar.dateComponents([.year, .month, .day], from: date)
        return String(format: "%04d-%02d-%02d", c.year!, c.month!, c.day!)
    }

    /// A log of every set of a session of one block of `sets` sets, all done.
    static func log(sets: Int, reps: Int = 8, weight: [String: Double] = ["weight_kg": 60], done: Bool = true) -> [String: Any] {
        [
            "performed_at": "\(day(0))T07:30:00+00:00",
            "sets": (1...sets).map { n in (["block": 1, "set": n, "reps": reps, "done": done] as [String: Any]).merging(weight) { $1 } },
        ]
    }
}
