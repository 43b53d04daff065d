import Foundation

extension HeadlessChromium {
    /// One page (a target attached in flattened mode): its commands and its events carry its session.
    public struct Page: Sendable {
        public let session: String
        public let browser: HeadlessChromium

        /// What `expression` evaluates to (a promise awaited), by value: a string, number, bool,
        /// array, dictionary, `NSNull`, or nil for `undefined` (and for what has no JSON form).
        /// Infinity and NaN come as `Double`s.
        /// - Throws: ``TestFailure`` when the expression throws (or its promise rejects).
        @discardableResult
        public func evaluate(_ expression: String) async throws -> sending Any? {
            let remote = try await remoteObject(expression)
            if let unserializable = remote["unserializableValue"] as? String {
                if let number = Double(unserializable) { return number }
                return unserializable
            }
            return remote["value"]
        }

        /// As ``evaluate(_:)``, for a string; anything else is a ``TestFailure``.
        public func evaluateString(_ expression: String) async throws -> String {
            let remote = try await remoteObject(expression)
            guard remote["type"] as? String == "string", let value = remote["value"] as? String else {
                throw unexpected(expression, remote, "a string")
            }
            return value
        }

        /// As ``evaluate(_:)``, for `true` or `false`; anything else is a ``TestFailure``.
        public func evaluateBool(_ expression: String) async throws -> Bool {
            let remote = try await remoteObject(expression)
            guard remote["type"] as? String == "boolean", let value = remote["value"] as? Bool else {
                throw unexpected(expression, remote, "true or false")
            }
            return value
        }

        /// As ``evaluate(_:)``, for a number; anything else is a ``TestFailure``.
        public func evaluateDouble(_ expression: String) async throws -> Double {
            let remote = try await remoteObject(expression)
            guard remote["type"] as? String == "number" else { throw unexpected(expression, remote, "a number") }
            if let text = remote["unserializableValue"] as? String, let number = Double(text) { return number }
            guard let number = DevTools.number(remote["value"]) else { throw unexpected(expression, remote, "a number") }
            return number
        }

        /// As ``evaluate(_:)``, for a whole number; anything else is a ``TestFailure``.
        public func evaluateInt(_ expression: String) async throws -> Int {
            let number = try await evaluateDouble(expression)
            guard let integer = Int(exactly: number) else {
                throw TestFailure("\(DevTools.shortened(expression)) gave \(number), not a whole number")
            }
            return integer
        }

        /// Waits until `expression` evaluates to `true`, asking every 100 ms; until then it may
        /// throw (its element not there yet, the page between loads).
        /// - Throws: ``TestFailure`` saying the page never showed `what`, with the page's text
        ///   and the end of its console.
        public func waitFor(_ expression: String, timeout: Duration = .seconds(20), what: String) async throws {
            let deadline = ContinuousClock.now + timeout
            var problem: String?
            while true {
                do {
                    let remote = try await remoteObject(expression)
                    if remote["type"] as? String == "boolean", remote["value"] as? Bool == true { return }
                    problem = nil
                } catch let failure as TestFailure {
                    guard browser.connection.isOpen else { throw failure }
                    problem = failure.description
                }
                if ContinuousClock.now >= deadline { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            var text = "(unreadable)"
            if let body = try? await remoteObject("document.body ? document.body.innerText.slice(0, 2000) : '(no body)'",
                                                  timeout: .seconds(5)),
               let value = body["value"] as? String {
                text = value
            }
            var report = "the page never showed \(what); its text: \(text)"
            let lines = console.suffix(20)
            report += lines.isEmpty ? "\nits console is empty" : "\nits console ends:\n" + lines.joined(separator: "\n")
            if let problem { report += "\nthe last check failed: \(problem)" }
            throw TestFailure(report)
        }

        /// Clicks the element `selector` finds as a mouse would: scrolled into view, the pointer
        /// moved to its centre, the left button pressed and released there.
        public func click(_ selector: String) async throws {
            let script = """
                (() => {
                  const element = document.querySelector(\(DevTools.literal(selector)));
                  if (!element) return null;
                  element.scrollIntoView({block: "center", inline: "center"});
                  const box = element.getBoundingClientRect();
                  if (box.width === 0 || box.height === 0) return null;
                  return {x: box.left + box.width / 2, y: box.top + box.height / 2};
                })()
                """
            guard let centre = try await evaluate(script) as? [String: Any],
                  let x = DevTools.number(centre["x"]), let y = DevTools.number(centre["y"]) else {
                throw TestFailure("no element \(selector) on the page")
            }
            try await browser.send("Input.dispatchMouseEvent", ["type": "mouseMoved", "x": x, "y": y], session: session)
            for kind in ["mousePressed", "mouseReleased"] {
                try await browser.send("Input.dispatchMouseEvent",
                                       ["type": kind, "x": x, "y": y, "button": "left", "clickCount": 1], session: session)
            }
        }

        /// Focuses the element `selector` finds and types `text` into it (inserted as an input
        /// method would, at the caret: what the field held stays).
        public func type(_ selector: String, _ text: String) async throws {
            let script = """
                (() => {
                  const element = document.querySelector(\(DevTools.literal(selector)));
                  if (!element) return "missing";
                  element.scrollIntoView({block: "center", inline: "center"});
                  element.focus();
                  return document.activeElement === element ? "focused" : "unfocused";
                })()
                """
            let focus = try await evaluateString(script)
            if focus == "missing" { throw TestFailure("no element \(selector) on the page") }
            if focus != "focused" { throw TestFailure("\(selector) takes no focus: nothing typed into it") }
            try await browser.send("Input.insertText", ["text": text], session: session)
        }

        /// Writes what the page's viewport shows to `path` as a PNG (its directory made if need be).
        public func screenshot(to path: String) async throws {
            let result = try await browser.send("Page.captureScreenshot", ["format": "png", "captureBeyondViewport": false],
                                                session: session)
            guard let encoded = result["data"] as? String, let png = Data(base64Encoded: encoded) else {
                throw TestFailure("Page.captureScreenshot gave no image")
            }
            let file = URL(fileURLWithPath: path)
            do {
                try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
                try png.write(to: file)
            } catch {
                throw TestFailure("cannot write the screenshot \(path): \(error)")
            }
        }

        /// The page's console so far, oldest first: "TYPE: arguments" per call (`log: ready 2`),
        /// and "exception: …" per exception nothing caught.
        public var console: [String] { browser.consoleLines(session: session) }

        /// `Runtime.evaluate`'s RemoteObject for `expression`, by value, its promise awaited.
        private func remoteObject(_ expression: String, timeout: Duration = .seconds(20)) async throws -> sending [String: Any] {
            let reply = try await browser.send("Runtime.evaluate",
                                               ["expression": expression, "returnByValue": true, "awaitPromise": true],
                                               session: session, timeout: timeout)
            if let details = reply["exceptionDetails"] as? [String: Any] {
                throw TestFailure("\(DevTools.shortened(expression)) threw: \(DevTools.describe(exception: details))")
            }
            guard let result = reply["result"] as? [String: Any] else { return [:] }
            return result
        }

        private func unexpected(_ expression: String, _ remote: [String: Any], _ wanted: String) -> TestFailure {
            let kind = remote["type"] as? String ?? "nothing"
            return TestFailure("\(DevTools.shortened(expression)) gave \(kind) \(DevTools.text(of: remote)), not \(wanted)")
        }
    }
}
