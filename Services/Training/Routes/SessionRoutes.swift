import Foundation
import Hummingbird
import PostgresNIO
import ServiceKit

/// The client's sessions: today, My Workouts, one session, logging and skipping; and the comments
/// coach and client leave on a session. Another user's session is `404`.
struct SessionRoutes {
    let training: Training

    func add(to router: Router<ServiceRequestContext>) {
        let training = router.group("v1/training", context: AuthenticatedContext.self)
        training.get("today", use: today)
        training.get("sessions", use: list)
        training.get("sessions/:id", use: session)
        training.post("sessions/:id/log", use: log)
        training.post("sessions/:id/skip", use: skip)
        training.get("sessions/:id/comments", use: comments)
        training.post("sessions/:id/comments", use: comment)
    }

    /// Today's sessions in the caller's time zone: one statement.
    @Sendable func today(_ request: Request, context: AuthenticatedContext) async throws -> EncodedJSON {
        try context.requireNotCoach()
        var problems: [Problem.FieldError] = []
        let accepted = Self.acceptedLink(request, problems: &problems)
        if !problems.isEmpty { throw APIError.validation(problems) }
        let training = self.training
        let user = context.caller.userID
        let read = { @Sendable () async throws -> (list: EncodedJSON, isEmpty: Bool) in
            try await training.postgres.withConnectionOnItsLoop { connection in
                try await training.sessions.days(of: user, from: nil, to: nil, on: connection, logger: context.logger)
            }
        }
        if let accepted {
            try await training.awaitAcceptance(of: user, named: accepted, logger: context.logger)
            return try await read().list
        }
        let first = try await read()
        // A client's first look, just after accepting: the plan may be a moment behind the role.
        guard first.isEmpty, context.caller.has(.client), try await training.awaitFirstAcceptance(of: user, logger: context.logger) else { return first.list }
        return try await read().list
    }

    static let maxDays = 92

    /// My Workouts: the sessions of `from` through `to` (the caller's days; default the next 7 from
    /// today), at most 92 days.
    @Sendable func list(_ request: Request, context: AuthenticatedContext) async throws -> EncodedJSON {
        try context.requireNotCoach()
        let query = request.uri.queryParameters
        var problems: [Problem.FieldError] = []
        func day(_ name: String) -> String? {
            guard let text = query[name[...]].map(String.init) else { return nil }
            guard LocalDay(text) != nil else {
                problems.append(.init(field: name, message: "must be a date, YYYY-MM-DD"))
                return nil
            }
            return text
        }
        let from = day("from")
        let to = day("to")
        let accepted = Self.acceptedLink(request, problems: &problems)
        if !problems.isEmpty { throw APIError.validation(problems) }
        let training = self.training
        let user = context.caller.userID
        let read = { @Sendable () async throws -> (list: EncodedJSON, isEmpty: Bool) in try await Self.days(training, of: user, from: from, to: to, context: context) }
        if let accepted {
            try await training.awaitAcceptance(of: user, named: accepted, logger: context.logger)
            return try await read().list
        }
        let first = try await read()
        // As for today: the plan may be a moment behind the `client` role.
        guard first.isEmpty, context.caller.has(.client), try await training.awaitFirstAcceptance(of: user, logger: context.logger) else { return first.list }
        return try await read().list
    }

    /// `roster_entry_id` or `coach_id`: the roster entry (invitations' answer to the acceptance names
    /// it) or the coach whose invitation the caller has just accepted. The acceptance reaches
    /// training on its own way, a moment behind invitations' answer, and until it has, a client
    /// switching coaches would be shown the former coach's plan (its end not heard here either),
    /// which the empty list's wait does not catch. With it, the read waits until that entry (or that
    /// coach's), and no other, is the caller's accepted one (`Training.awaitAcceptance`), whatever
    /// roles their token carries: one signed before the acceptance has no `client` role yet. The
    /// entry tells apart two invitations of the same coach, the coach does not. A coach's token is
    /// refused before (`requireNotCoach`), and the wait holds no connection.
    static func acceptedLink(_ request: Request, problems: inout [Problem.FieldError]) -> AcceptedLink? {
        let query = request.uri.queryParameters
        func id(_ name: String) -> UUID? {
            guard let text = query[name[...]] else { return nil }
            guard let id = UUID(uuidString: String(text)) else {
                problems.append(.init(field: name, message: "must be a UUID"))
                return nil
            }
            return id
        }
        let entry = id("roster_entry_id")
        let coach = id("coach_id")
        switch (entry, coach) {
        case (let entry?, nil): return .entry(entry)
        case (nil, let coach?): return .coach(coach)
        case (_?, _?):
            problems.append(.init(field: "roster_entry_id", message: "give roster_entry_id or coach_id, not both"))
            return nil
        case (nil, nil): return nil
        }
    }

    /// `from` through `to` of the caller's days, or validation's answer.
    static func days(_ training: Training, of user: UUID, from: String?, to: String?, context: AuthenticatedContext) async throws -> (list: EncodedJSON, isEmpty: Bool) {
        try await training.postgres.withConnectionOnItsLoop { connection in
            // Without `to`, a week from `from` (or today), within 9999-12-31, the last day the API
            // writes; the range is checked in SQL, where the days are.
            let rows = try await connection.checkedQuery(
                """
                WITH st AS (SELECT (now() AT TIME ZONE coalesce((SELECT time_zone FROM user_settings WHERE user_id = \(user)), 'UTC'))::date AS today),
                f AS (SELECT coalesce(\(from)::date, today) AS first FROM st)
                , l AS (SELECT first, coalesce(\(to)::date, least(first + 6, '9999-12-31'::date)) AS last FROM f)
                SELECT first::text, last::text, last - first FROM l
                """, logger: context.logger)
            var range = ("", "", 0)
            for try await row in rows.decode((String, String, Int32).self) { range = (row.0, row.1, Int(row.2)) }
            guard range.2 >= 0 else { throw APIError.validation([.init(field: "to", message: "must not be before from")]) }
            guard range.2 < Self.maxDays else { throw APIError.validation([.init(field: "to", message: "must be within \(Self.maxDays) days of from")]) }
            return try await training.sessions.days(of: user, from: range.0, to: range.1, on: connection, logger: context.logger)
        }
    }

    /// One session with what was logged and its comments, for its client or its coach; its `ETag` is
    /// what a log's `If-Match` names.
    @Sendable func session(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<SessionDetail> {
        let id = try context.sessionID()
        let training = self.training
        let user = context.caller.userID
        // One snapshot: the ETag is the version of the sets shown, however a log races the read.
        let detail = try await training.postgres.snapshot(logger: context.logger) { connection in
            guard let session = try await training.sessions.find(id, party: user, on: connection, logger: context.logger) else { throw SessionErrors.sessionNotFound }
            return try await Self.detail(session, viewer: user, training: training, on: connection, logger: context.logger)
        }
        return detail.tagged
    }

    static func detail(_ session: SessionRecord, viewer: UUID, training: Training, on connection: PostgresConnection, logger: Logger) async throws -> SessionDetail {
        let (unit, sets, comments) = try await training.sessions.detail(of: session.id, viewer: viewer, on: connection, logger: logger)
        return SessionDetail(session: session, unit: unit, sets: sets, comments: comments)
    }

    /// Logs the session (`completed` when every prescribed set is done, else `partial`), replacing an
    /// earlier log of it: an app that logs offline and retries, with its `Idempotency-Key` or without,
    /// leaves one log. The coach hears of it live (`workout_logged`), once for each log that changes
    /// what the session holds: a retry of the log it has already is not news.
    ///
    /// One statement reads the session, checks the log against it, writes the log and its event,
    /// and writes the answer (`SessionStore.LogQuery`): no transaction, so no round trips to open and
    /// close one, and no read before it or after the commit that another log could slip in between.
    /// When the session changed between that statement's read and its lock (another log of it, a
    /// coach's push), it runs again in a transaction that holds the session from the start.
    ///
    /// With `If-Match` (the `ETag` of the session as the app showed it), only if the session is still
    /// that version: a coach's push in between changes which exercise each block is, and a log of
    /// the blocks as they were must not be filed under the new ones. A session its coach pushed, not
    /// logged since, is logged only with `If-Match` (`428`): without it nothing tells which blocks
    /// the client saw.
    @Sendable func log(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<EncodedJSON> {
        try context.requireNotCoach()
        let id = try context.sessionID()
        let body = try await request.decode(as: LogDraft.Body.self, context: context)
        let training = self.training
        let user = context.caller.userID
        let (versions, namesAVersion) = (EntityTag.versions(ifMatchOf: request), EntityTag.namesAVersion(ifMatchOf: request))
        let draft: LogDraft
        do {
            draft = try LogDraft(body)
        } catch {
            // A log that cannot be taken says first what the session says (not the caller's, another
            // version, pushed, cancelled before the workout's time, when that can be read), as one that
            // can be is told, then every problem of the log.
            try await training.postgres.withConnectionOnItsLoop { connection in
                guard let session = try await training.sessions.find(id, party: user, on: connection, logger: context.logger), session.clientID == user else {
                    throw SessionErrors.sessionNotFound
                }
                try EntityTag(version: Int64(session.version)).check(ifMatchOf: request)
                if session.pushed, !namesAVersion { throw SessionErrors.pushedNeedsIfMatch }
                if let performed = RFC3339.strictDate(from: body.performedAt), !session.takesLog(performedAt: performed) { throw SessionErrors.cancelled }
                _ = try LogDraft(body, blocks: session.blocks.count)
            }
            throw error
        }
        // For the session's coach, whom the statement reads, with the status it decides.
        let event = try training.outbox.entry(
            WorkoutLogged(sessionID: id, coachID: SessionStore.coachToBeRead, clientID: user, status: "partial"), userID: user
        ).envelope
        let log = { @Sendable (connection: PostgresConnection) async throws -> SessionStore.LogOutcome in
            try await training.sessions.log(
                draft, session: id, client: user, ifMatch: versions, namesAVersion: namesAVersion, event: event, on: connection, logger: context.logger)
        }
        var outcome = try await training.postgres.withConnectionOnItsLoop { try await log($0) }
        if case .changed = outcome {
            outcome = try await training.postgres.transaction(logger: context.logger) { connection in
                // Locked until the commit: the statement's read is then the session as it writes it.
                _ = try await training.sessions.find(id, party: user, lock: true, on: connection, logger: context.logger)
                return try await log(connection)
            }
        }
        switch outcome {
        case .logged(let version, let answer, let eventWritten):
            if eventWritten { training.outbox.wrote() }
            return EditedResponse(headers: [.eTag: EntityTag(version: Int64(version)).description], response: EncodedJSON(rendered: answer))
        case .notFound: throw SessionErrors.sessionNotFound
        case .preconditionFailed(let version):
            // The session holds this log, written over the version named: the resend of a log whose
            // answer was lost. It is answered as the log was (RFC 9110 §13.1.1), not refused.
            let held = try await training.postgres.snapshot(logger: context.logger) { connection -> SessionDetail? in
                guard let versions, !versions.isEmpty,
                    try await training.sessions.holds(draft, session: id, client: user, over: versions, on: connection, logger: context.logger),
                    let session = try await training.sessions.find(id, party: user, on: connection, logger: context.logger)
                else { return nil }
                return try await Self.detail(session, viewer: user, training: training, on: connection, logger: context.logger)
            }
            guard let held else { throw EntityTag(version: Int64(version)).preconditionFailed }
            return EditedResponse(headers: [.eTag: EntityTag(version: Int64(held.session.version)).description], response: try EncodedJSON(held))
        case .preconditionRequired: throw SessionErrors.pushedNeedsIfMatch
        case .cancelled: throw SessionErrors.cancelled
        case .blockOutOfRange(let blocks):
            // Every problem of the log, the block's among them.
            _ = try LogDraft(body, blocks: blocks)
            throw SessionStore.LogQuery.noRow
        case .changed:
            // Not while the session is held.
            throw SessionStore.LogQuery.noRow
        }
    }

    struct SkipBody: StrictJSONBody {
        var reason: String?
        enum CodingKeys: String, CodingKey, CaseIterable { case reason }
    }

    /// Skips a session not logged; skipping it again changes the reason. The answer carries the
    /// session's new `ETag`, which a log after it names.
    @Sendable func skip(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<SessionDetail> {
        try context.requireNotCoach()
        let id = try context.sessionID()
        let body = try await request.decodeIfPresent(as: SkipBody.self, context: context)
        if let reason = body?.reason, reason.codePoints > 500 || reason.replacingOccurrences(of: "\r\n", with: "\n").hasInvisibleCharacters(allowing: ["\n"]) {
            throw APIError.validation([.init(field: "reason", message: "must be at most 500 characters without control characters")])
        }
        let training = self.training
        let user = context.caller.userID
        let skipped = try await training.postgres.transaction(logger: context.logger) { connection in
            guard let session = try await training.sessions.find(id, party: user, lock: true, on: connection, logger: context.logger), session.clientID == user else {
                throw SessionErrors.sessionNotFound
            }
            switch session.status {
            case "cancelled": throw SessionErrors.cancelled
            case "completed", "partial": throw SessionErrors.logged
            default: break
            }
            try await training.sessions.skip(id, reason: body?.reason, on: connection, logger: context.logger)
            let skipped = try await training.sessions.find(id, party: user, on: connection, logger: context.logger)!
            return try await Self.detail(skipped, viewer: user, training: training, on: connection, logger: context.logger)
        }
        return skipped.tagged
    }

    struct CommentCursor: Codable {
        var createdAt: Date
        var id: UUID
        enum CodingKeys: String, CodingKey { case createdAt = "c", id = "i" }
    }

    struct CommentPage: ResponseEncodable {
        var items: [CommentView]
        @Nullable var nextCursor: String?
        enum CodingKeys: String, CodingKey { case items, nextCursor = "next_cursor" }
    }

    /// The whole thread of a session, oldest first, a page at a time, for its client or its coach.
    @Sendable func comments(_ request: Request, context: AuthenticatedContext) async throws -> CommentPage {
        let id = try context.sessionID()
        let page = try PageRequest(query: request)
        let after = try page.position(CommentCursor.self)
        let training = self.training
        let user = context.caller.userID
        return try await training.postgres.withConnectionOnItsLoop { connection in
            guard try await training.sessions.find(id, party: user, on: connection, logger: context.logger) != nil else { throw SessionErrors.sessionNotFound }
            let rows = try await training.sessions.comments(
                of: id, after: after.map { ($0.createdAt, $0.id) }, limit: page.limit + 1, on: connection, logger: context.logger)
            let (items, next) = Cursor.page(rows, limit: page.limit) { CommentCursor(createdAt: $0.createdAt, id: $0.id) }
            return CommentPage(items: items, nextCursor: next)
        }
    }

    struct CommentBody: StrictJSONBody {
        var text: String
        enum CodingKeys: String, CodingKey, CaseIterable { case text }
    }

    /// A comment by the session's coach or client; the other one hears of it live
    /// (`workout_comment`).
    @Sendable func comment(_ request: Request, context: AuthenticatedContext) async throws -> EditedResponse<CommentView> {
        let id = try context.sessionID()
        let body = try await request.decode(as: CommentBody.self, context: context)
        let text = body.text.trimmingCharacters(in: .whitespacesAndNewlines)
        // A line break is "\n" or "\r\n"; a carriage return alone could overwrite what a log viewer shows.
        guard (1...2000).contains(text.codePoints), !text.replacingOccurrences(of: "\r\n", with: "\n").hasInvisibleCharacters(allowing: ["\n"]) else {
            throw APIError.validation([.init(field: "text", message: "must be 1 to 2000 characters without control characters")])
        }
        let training = self.training
        let user = context.caller.userID
        let comment = try await training.postgres.transaction(logger: context.logger) { connection in
            try await connection.requireLiveAccount(user, logger: context.logger)
            // The session's row lock orders concurrent comments, so the count cannot pass the cap.
            guard let session = try await training.sessions.find(id, party: user, lock: true, on: connection, logger: context.logger) else {
                throw SessionErrors.sessionNotFound
            }
            guard try await training.sessions.commentCount(of: id, on: connection, logger: context.logger) < SessionStore.maxComments else {
                throw SessionErrors.commentLimit
            }
            let role = session.coachID == user ? "coach" : "client"
            let comment = try await training.sessions.addComment(UUID(), session: id, author: user, role: role, text: text, on: connection, logger: context.logger)
            // A coach the client has left is not told (nor could read the session).
            if let other = role == "coach" ? session.clientID : session.coachLinked ? session.coachID : nil {
                try await training.outbox.write(
                    WorkoutCommented(sessionID: id, commentID: comment.id, authorID: user, authorRole: role, text: text), userID: user, liveTo: other,
                    on: connection, logger: context.logger)
            }
            return comment
        }
        return EditedResponse(status: .created, response: comment)
    }
}
