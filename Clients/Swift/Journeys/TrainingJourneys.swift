import FoodBackendAPI
import FoodBackendClient
import Foundation

/// A coach builds a workout from the library and an exercise of their own, plans three days for a
/// client invited but not yet signed up, edits and pushes the workout, and unschedules a day; the
/// client accepts, finds today's session, logs it once (retried with its key) and skips another,
/// reads History and records in pounds; both comment on the logged session.
func aCoachPlansWorkoutsAndTheClientLogsThem() async throws {
    let coach = try await signUp("trainer", verified: true)
    _ = try await coach.app.send { try await $0.postV1AuthRolesCoach().ok.body.json }
    try await coach.app.refreshSession()
    let roles = await coach.app.currentSession?.roles ?? []
    try expect(roles.contains("coach"), "the coach role in the token: \(roles)")
    let coachStream = try await StreamReader(coach.app)
    defer { coachStream.close() }

    // The library, searched by a misspelt name and by muscle.
    let found = try await coach.app.send { try await $0.getV1Exercises(query: .init(q: "push ups", limit: 5)).ok.body.json }
    try expect(!found.items.isEmpty && found.items.allSatisfy { $0.source == .library }, "the library finds push-ups: \(found.items.map(\.name))")
    let chest = try await coach.app.send { try await $0.getV1Exercises(query: .init(muscle: .chest, limit: 3)).ok.body.json }
    try expect(chest.items.allSatisfy { ($0.primaryMuscles + $0.secondaryMuscles).contains(.chest) }, "the chest exercises: \(chest.items.map(\.name))")
    let pushUp = found.items[0]
    let read = try await coach.app.send { try await $0.getV1ExercisesId(path: .init(id: pushUp.id)).ok.body.json }
    try expect(read.id == pushUp.id && read.name == pushUp.name, "the exercise read back: \(read)")

    // An exercise of the coach's own: created, renamed with its ETag, then deleted.
    let ownName = "Journey sled push \(UUID().uuidString.prefix(6))"
    let created = try await coach.app.send {
        try await $0.postV1Exercises(
            body: .json(.init(instructions: ["Drive the sled 20 m"], name: ownName, primaryMuscles: [.quadriceps]))
        ).created
    }
    let own = try created.body.json
    try expect(own.source == .coach && same(own.coachId, coach.id), "the coach's own exercise: \(own)")
    try expect(created.headers.eTag != nil, "the exercise's ETag")
    let renamed = try await coach.app.send {
        try await $0.patchV1ExercisesId(
            path: .init(id: own.id), headers: .init(ifMatch: created.headers.eTag), body: .json(.init(name: ownName + " heavy"))
        ).ok
    }
    try expect(try renamed.body.json.name == ownName + " heavy", "the exercise renamed")
    try await expectProblem("precondition_failed", "an edit with the ETag before the rename") {
        try await coach.app.send {
            try await $0.patchV1ExercisesId(path: .init(id: own.id), headers: .init(ifMatch: created.headers.eTag), body: .json(.init(name: ownName))).ok
        }
    }
    _ = try await coach.app.send { try await $0.deleteV1ExercisesId(path: .init(id: own.id), headers: .init(ifMatch: renamed.headers.eTag)).noContent }
    try await expectProblem("exercise_not_found", "the deleted exercise") {
        try await coach.app.send { try await $0.getV1ExercisesId(path: .init(id: own.id)).ok }
    }

    // The workout: created, read with its ETag, listed.
    let input = Components.Schemas.WorkoutInput(
        blocks: [.init(exerciseId: pushUp.id, sets: [.init(reps: 10, weightKg: 20), .init(reps: 10, weightKg: 20)])], name: "Journey week one")
    let posted = try await coach.app.send { try await $0.postV1Workouts(body: .json(input)).created.body.json }
    let got = try await coach.app.send { try await $0.getV1WorkoutsId(path: .init(id: posted.id)).ok }
    try expect(try got.body.json.blocks.count == 1 && got.headers.eTag != nil, "the workout read back with its ETag")
    let workouts = try await coach.app.send { try await $0.getV1Workouts(query: .init(limit: 10)).ok.body.json }
    try expect(workouts.items.map(\.id) == [posted.id], "the coach's workouts: \(workouts.items)")

    // Invited and planned before the client has an account: today and the two days after, in UTC
    // (the client's time zone until they set another).
    // The days are read here and again, after the acceptance, by the service: not across midnight,
    // where the two would differ.
    try await clearOfMidnight()
    let clientEmail = uniqueEmail("trainee")
    let entry = try await coach.app.send { try await $0.postV1Clients(body: .json(.init(email: clientEmail, name: "Swift Trainee"))).created.body.json }
    let days = (0..<3).map { day(Date().addingTimeInterval(Double($0) * 86_400)) }
    let planned = try await coach.app.send {
        try await $0.postV1TrainingClientsClientIdAssignments(path: .init(clientId: entry.id), body: .json(.init(dates: days, workoutId: posted.id)))
            .created.body.json
    }
    let sessions = planned.items
    try expect(sessions.map(\.scheduledOn) == days && sessions.allSatisfy { $0.clientId == nil && $0.status == .scheduled }, "the plan: \(sessions)")

    // The workout replaced (with its ETag, a stale one refused) and pushed onto the planned sessions.
    var heavier = input
    heavier.blocks[0].sets.append(.init(reps: 8, weightKg: 22.5))
    let replaced = try await coach.app.send {
        try await $0.putV1WorkoutsId(path: .init(id: posted.id), headers: .init(ifMatch: got.headers.eTag), body: .json(heavier)).ok
    }
    try expect(try replaced.body.json.blocks[0].sets.count == 3, "the workout replaced")
    try await expectProblem("precondition_failed", "a replacement with the old ETag") {
        try await coach.app.send { try await $0.putV1WorkoutsId(path: .init(id: posted.id), headers: .init(ifMatch: got.headers.eTag), body: .json(input)).ok }
    }
    let pushed = try await coach.app.send { try await $0.postV1WorkoutsIdPush(path: .init(id: posted.id)).ok.body.json }
    try expect(pushed.updated == 3 && Set(pushed.sessionIds.map { $0.lowercased() }) == Set(sessions.map { $0.id.lowercased() }), "pushed: \(pushed)")

    // The third day unscheduled.
    _ = try await coach.app.send { try await $0.deleteV1TrainingSessionsId(path: .init(id: sessions[2].id)).noContent }

    // The client signs up from the mail; nothing planned shows until they accept.
    let mail = try await mails(to: clientEmail).last!
    let code = try capture("/invite\\?code=([A-Za-z0-9_-]{20,})", in: mail)
    let client = try await {
        let app = newApp()
        let signIn = try await app.signUp(email: clientEmail, password: "swift journey trainee password")
        let user = AppUser(app: app, email: clientEmail, password: "swift journey trainee password", id: signIn.user.id)
        try await verifyFromTheMail(user)
        return user
    }()
    let before = try await client.app.send { try await $0.getV1TrainingToday().ok.body.json }
    try expect(before.items.isEmpty, "nothing today before accepting: \(before.items)")
    let accepted = try await step("the acceptance") {
        try await client.app.send { try await $0.postV1InvitationsCodeAccept(path: .init(code: code)).ok.body.json }
    }
    try await client.app.refreshSession()
    let clientStream = try await StreamReader(client.app)
    defer { clientStream.close() }
    // Naming the coach just accepted, the first read waits for their plan.
    let today = try await client.app.send { try await $0.getV1TrainingToday(query: .init(coachId: accepted.coach.id)).ok.body.json }
    try expect(today.items.map(\.id) == [sessions[0].id], "the planned session in the client's first today: \(today.items.map(\.id))")
    try expect(today.items[0].blocks.first?.sets.count == 3 && same(today.items[0].clientId, client.id), "today's session, pushed: \(today.items[0])")
    let week = try await client.app.send { try await $0.getV1TrainingSessions(query: .init(from: days[0], to: days[2])).ok.body.json }
    try expect(week.items.map(\.id) == [sessions[0].id, sessions[1].id], "My Workouts without the unscheduled day: \(week.items.map(\.scheduledOn))")
    let one = try await client.app.send { try await $0.getV1TrainingSessionsId(path: .init(id: sessions[1].id)).ok.body.json }
    try expect(one.value1.status == .scheduled && one.value2.loggedSets.isEmpty, "the second session: \(one.value1)")
    try await expectProblem("forbidden", "the coach's view, asked by the client") {
        try await client.app.send { try await $0.getV1TrainingClientsClientId(path: .init(clientId: entry.id)).ok }
    }

    // Settings in pounds; the log (sent twice with one key, as an offline retry) completes today's session.
    let settings = try await client.app.send { try await $0.getV1TrainingSettings().ok.body.json }
    try expect(settings.timeZone == "UTC" && settings.weightUnit == .kg, "the default settings: \(settings)")
    let pounds = try await client.app.send { try await $0.putV1TrainingSettings(body: .json(.init(timeZone: "UTC", weightUnit: .lbs))).ok.body.json }
    try expect(pounds.weightUnit == .lbs, "the settings in pounds: \(pounds)")
    let log = Components.Schemas.LogInput(
        notes: "felt strong", performedAt: Date().addingTimeInterval(-60),
        sets: [
            .init(block: 1, done: true, reps: 10, set: 1, weightLbs: 45), .init(block: 1, done: true, reps: 10, set: 2, weightLbs: 45),
            .init(block: 1, done: true, reps: 8, set: 3, weightLbs: 50),
        ])
    // The app logs the session as it showed it: its ETag in If-Match. A training of the release
    // before sends none (sessions had no versions), and takes a log without it, as an app does then.
    let shown = try await client.app.send { try await $0.getV1TrainingSessionsId(path: .init(id: sessions[0].id)).ok }
    let shownTag = shown.headers.eTag
    if shownTag == nil, !Environment.mixesReleases { throw JourneyFailure(description: "the session has no ETag") }
    let key = "log-\(UUID().uuidString)"
    let logged = try await client.app.send {
        try await $0.postV1TrainingSessionsIdLog(path: .init(id: sessions[0].id), headers: .init(idempotencyKey: key, ifMatch: shownTag), body: .json(log)).ok.body.json
    }
    try expect(logged.value1.status == .completed && logged.value2.loggedSets.count == 3, "the log completes the session: \(logged.value1.status)")
    let retried = try await client.app.send {
        try await $0.postV1TrainingSessionsIdLog(path: .init(id: sessions[0].id), headers: .init(idempotencyKey: key, ifMatch: shownTag), body: .json(log)).ok.body.json
    }
    try expect(retried.value1.status == .completed && retried.value2.loggedSets.count == 3, "the retried log, once: \(retried.value2.loggedSets)")
    let heard = try await coachStream.next("workout_logged") { event -> LiveEvent.WorkoutLogged? in
        if case .workoutLogged(let logged) = event.kind { return logged }
        return nil
    }
    try expect(same(heard.sessionId, sessions[0].id) && same(heard.clientId, client.id) && heard.status == "completed", "the coach hears of the log: \(heard)")
    let skipped = try await client.app.send {
        try await $0.postV1TrainingSessionsIdSkip(path: .init(id: sessions[1].id), body: .json(.init(reason: "travelling"))).ok.body.json
    }
    try expect(skipped.value1.status == .skipped && skipped.value1.skipReason == "travelling", "the skipped session: \(skipped.value1)")

    let history = try await client.app.send { try await $0.getV1TrainingHistory(query: .init(exerciseId: pushUp.id)).ok.body.json }
    try expect(history.items.map(\.value1.id) == [sessions[0].id], "History holds the logged session: \(history.items.map(\.value1.id))")
    let records = try await client.app.send { try await $0.getV1TrainingRecords().ok.body.json }
    try expect(records.weightUnit == .lbs && records.items.contains { same($0.exerciseId, pushUp.id) && abs($0.weight - 50) < 0.001 }, "the records in pounds: \(records)")

    // The coach reads the client's days, with adherence; both comment on the logged session.
    let progress = try await coach.app.send {
        try await $0.getV1TrainingClientsClientId(path: .init(clientId: entry.id), query: .init(from: days[0], to: days[2])).ok.body.json
    }
    try expect(same(progress.client.userId, client.id) && progress.client.status == .accepted, "the coach's view of the client: \(progress.client)")
    let done = progress.items.first { $0.value1.id == sessions[0].id }
    try expect(done?.value1.status == .completed && done?.value2.loggedSets.count == 3, "the coach sees the log: \(String(describing: done?.value1))")
    try expect(progress.adherence.last7Days.completed == 1, "adherence counts the log: \(progress.adherence.last7Days)")
    let fromCoach = try await coach.app.send {
        try await $0.postV1TrainingSessionsIdComments(path: .init(id: sessions[0].id), body: .json(.init(text: "Strong start, add 5 lb"))).created.body.json
    }
    try expect(fromCoach.authorRole == .coach, "the coach's comment: \(fromCoach)")
    let told = try await clientStream.next("workout_comment") { event -> LiveEvent.WorkoutComment? in
        if case .workoutComment(let comment) = event.kind { return comment }
        return nil
    }
    try expect(same(told.commentId, fromCoach.id) && told.authorRole == "coach" && told.text == "Strong start, add 5 lb", "the client hears of the comment: \(told)")
    _ = try await client.app.send {
        try await $0.postV1TrainingSessionsIdComments(path: .init(id: sessions[0].id), body: .json(.init(text: "Will do"))).created.body.json
    }
    let thread = try await client.app.send { try await $0.getV1TrainingSessionsId(path: .init(id: sessions[0].id)).ok.body.json }
    try expect(thread.value2.comments.map(\.text) == ["Strong start, add 5 lb", "Will do"], "the comments: \(thread.value2.comments)")
    // The whole thread, a page at a time (the detail carries only the latest comments).
    var comments: [Components.Schemas.Comment] = []
    for try await comment in coach.app.pages({ api, cursor in
        let page = try await api.getV1TrainingSessionsIdComments(path: .init(id: sessions[0].id), query: .init(limit: 1, cursor: cursor)).ok.body.json
        return (page.items, page.nextCursor)
    }) {
        comments.append(comment)
    }
    try expect(comments.map(\.text) == ["Strong start, add 5 lb", "Will do"], "the thread: \(comments)")

    // The workout deleted with its ETag; the sessions keep their copy.
    _ = try await coach.app.send { try await $0.deleteV1WorkoutsId(path: .init(id: posted.id), headers: .init(ifMatch: replaced.headers.eTag)).noContent }
    try await expectProblem("workout_not_found", "the deleted workout") { try await coach.app.send { try await $0.getV1WorkoutsId(path: .init(id: posted.id)).ok } }
    let kept = try await client.app.send { try await $0.getV1TrainingSessionsId(path: .init(id: sessions[0].id)).ok.body.json }
    try expect(kept.value1.blocks.first?.sets.count == 3, "the session keeps its copy of the workout")
}

/// Waits out midnight in UTC when it is less than `margin` seconds away.
private func clearOfMidnight(margin: Double = 180) async throws {
    let left = 86_400 - Date().timeIntervalSince1970.truncatingRemainder(dividingBy: 86_400)
    guard left < margin else { return }
    try await Task.sleep(for: .seconds(left + 1))
}

/// The day of `date` in UTC, as the API writes days (YYYY-MM-DD).
private func day(_ date: Date) -> String {
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = TimeZone(identifier: "UTC")!
    let parts = calendar.dateComponents([.year, .month, .day], from: date)
    return String(format: "%04d-%02d-%02d", parts.year!, parts.month!, parts.day!)
}
