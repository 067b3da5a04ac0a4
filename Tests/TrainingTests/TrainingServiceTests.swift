import Foundation
import ServiceKit
import ServiceKitDatabase
import ServiceKitEvents
import Testing
import TestSupport
@testable import Training

@Suite struct TrainingServiceTests {
    /// The executable's own build function boots against real PostgreSQL and Redis: migrations into
    /// its schema (the exercise library's with them), readiness, health, metrics and problem+json
    /// for unknown paths, and the routes served are the ones `openapi.yaml` documents.
    @Test func bootsAndServesHealth() async throws {
        let failures = try await assertServiceServesHealth(name: "training", build: buildApplication)
        #expect(failures.isEmpty, "\(failures)")
    }
}

@Suite struct TrainingStatementPlanTests {
    /// Today's sessions are what every app reads as it opens: their statement keeps one plan for
    /// every client and day, rather than PostgreSQL planning it again on every request.
    @Test func todaysSessionsArePlannedOnce() async throws {
        try await TrainingTestEnvironment.run { env in
            let (coach, client, entry, workout) = try await env.coachWithClient()
            // The days once, so that a run across midnight asks for the week it assigned.
            let (today, tomorrow, weekEnd) = (TrainingTestEnvironment.day(0), TrainingTestEnvironment.day(1), TrainingTestEnvironment.day(6))
            _ = try await env.assign(workout, to: entry, by: coach, on: [today, tomorrow])
            // The planner weighs its plans by the table's statistics: beside this client's two
            // sessions, another client's two years of them, analysed.
            try await env.execute(
                """
                INSERT INTO sessions (id, coach_id, client_id, name, blocks, scheduled_on)
                SELECT gen_random_uuid(), '\(coach.id)', '\(UUID())', 'Session ' || i, '[]', current_date - (i % 730)
                FROM generate_series(1, 20000) AS i
                """)
            try await env.execute("ANALYZE sessions")
            let plans = try await env.plans(of: SessionStore.DaysQuery.name) { connection in
                for n in 0..<10 {
                    // Today, then a week, as `today` and My Workouts ask.
                    let (from, to) = n % 2 == 0 ? (nil, nil) : (today, weekEnd)
                    let list = try await SessionStore().days(of: client.id, from: from, to: to, on: connection, logger: TestEnvironment.logger)
                    let sessions = try #require(try JSONSerialization.jsonObject(with: Data(buffer: list.list.body)) as? [String: Any])["items"] as? [Any]
                    if n % 2 == 1 { #expect(sessions?.count == 2) } else { #expect(sessions?.isEmpty == false) }
                }
            }
            #expect(plans.generic >= 5, "\(plans)")
        }
    }

    /// Every row a user's request makes (here settings, an exercise, a workout, a comment) is made
    /// holding the account: a deleted one is refused, a live one held shared until the commit.
    @Test func aDeletedAccountIsRefusedAndALiveOneHeld() async throws {
        try await TrainingTestEnvironment.run { env in
            let (deleted, live) = (UUID(), UUID())
            try await env.withConnection { connection in
                try await connection.recordDeletedAccount(deleted, logger: TestEnvironment.logger)
                for n in 0..<4 {
                    _ = try await connection.query("BEGIN", logger: TestEnvironment.logger)
                    do {
                        try await connection.requireLiveAccount(n % 2 == 0 ? deleted : live, logger: TestEnvironment.logger)
                        #expect(n % 2 == 1, "a deleted account passed")
                        let held = try await connection.query(
                            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ShareLock' AND pid = pg_backend_pid()",
                            logger: TestEnvironment.logger)
                        for try await count in held.decode(Int.self) { #expect(count == 1) }
                    } catch let error as APIError {
                        #expect(n % 2 == 0 && error.code == "account_deleted", "\(error)")
                    }
                    _ = try await connection.query("COMMIT", logger: TestEnvironment.logger)
                }
            }
        }
    }
}
