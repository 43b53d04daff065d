extension AudioBridge {
    /// What a conference member played that the mix has not taken yet, oldest first: a ring
    /// that allocates once, at its first frame.
    struct PlayedQueue: Sendable {
        private var samples: [Int16] = []
        private var head = 0
        private(set) var count = 0

        /// Appends `played`; beyond `capacity` samples the oldest give way.
        mutating func append(_ played: [Int16], keeping capacity: Int) {
            if samples.count != capacity { (samples, head, count) = ([Int16](repeating: 0, count: capacity), 0, 0) }
            let incoming = min(played.count, capacity)
            drop(count + incoming - capacity)
            var tail = (head + count) % capacity, from = played.count - incoming, left = incoming
            played.withUnsafeBufferPointer { source in
                samples.withUnsafeMutableBufferPointer { ring in
                    while left > 0 {
                        let run = min(left, capacity - tail)
                        (ring.baseAddress! + tail).update(from: source.baseAddress! + from, count: run)  // both hold the run
                        (tail, from, left) = ((tail + run) % capacity, from + run, left - run)
                    }
                }
            }
            count += incoming
        }

        /// Hands the oldest `taken` samples to `body` (in at most two runs, each with its offset
        /// from the first), then lets them go.
        mutating func take(_ taken: Int, _ body: (UnsafeBufferPointer<Int16>, Int) -> Void) {
            let taken = min(taken, count)
            guard taken > 0 else { return }
            let first = min(taken, samples.count - head)
            samples.withUnsafeBufferPointer { all in
                body(UnsafeBufferPointer(rebasing: all[head..<(head + first)]), 0)
                if first < taken { body(UnsafeBufferPointer(rebasing: all[0..<(taken - first)]), first) }
            }
            drop(taken)
        }

        mutating func drop(_ dropped: Int) {
            let dropped = min(dropped, count)
            guard dropped > 0 else { return }
            head = (head + dropped) % samples.count
            count -= dropped
        }

        mutating func removeAll() { (head, count) = (0, 0) }
    }
}
